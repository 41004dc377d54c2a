package routing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

// genConfig writes a random valid config: backends with random families,
// translation switches and hosted-tools policies; models with random
// targets, weights (some drained), priorities and context windows (some
// unknown, some shared).
func genConfig(rng *rand.Rand) string {
	var y strings.Builder
	nb := 1 + rng.IntN(5)
	y.WriteString("backends:\n")
	for i := range nb {
		var fams []string
		for _, f := range config.FamilyNames {
			if rng.IntN(3) == 0 {
				fams = append(fams, f)
			}
		}
		if len(fams) == 0 {
			fams = append(fams, config.FamilyNames[rng.IntN(len(config.FamilyNames))])
		}
		fmt.Fprintf(&y, "  - {name: b%d, base_url: \"http://10.0.0.%d/v1\", families: [%s], hosted_tools: %s, keys: [{id: k%d, secret: env:K}]",
			i, i+1, strings.Join(fams, ", "), config.HostedToolsPolicies[rng.IntN(len(config.HostedToolsPolicies))], i)
		switch rng.IntN(3) {
		case 0:
			y.WriteString(", translate: false")
		case 1:
			y.WriteString(", translate: true")
		}
		y.WriteString("}\n")
	}
	windows := []int{0, 0, 1000, 4000, 8000, 8000, 128000}
	y.WriteString("models:\n")
	for m := range 1 + rng.IntN(3) {
		fmt.Fprintf(&y, "  - name: m%d\n    targets:\n", m)
		bs := rng.Perm(nb)[:1+rng.IntN(nb)]
		sums := map[int]int{}
		type tgt struct{ b, w, p, c int }
		var ts []tgt
		for _, b := range bs {
			t := tgt{b, rng.IntN(3), rng.IntN(3), windows[rng.IntN(len(windows))]}
			sums[t.p] += t.w
			ts = append(ts, t)
		}
		for i := range ts {
			if sums[ts[i].p] == 0 { // validation: every priority gets traffic
				ts[i].w, sums[ts[i].p] = 1, 1
			}
			fmt.Fprintf(&y, "      - {backend: b%d, weight: %d, priority: %d, context_window: %d}\n", ts[i].b, ts[i].w, ts[i].p, ts[i].c)
		}
	}
	return y.String()
}

// facts is one generated request and the oracle's view of it.
type facts struct {
	req           Request
	inexpressible map[string]bool // backends the body cannot be translated for
}

func genFacts(rng *rand.Rand, cfg *config.Config, m *config.Model) facts {
	f := facts{inexpressible: map[string]bool{}}
	f.req.Family = config.FamilyNames[rng.IntN(len(config.FamilyNames))]
	f.req.Untranslated = f.req.Family == config.FamilyAnthropicMessages && rng.IntN(3) == 0 // count_tokens
	needs := []int{0, 1, 999, 1000, 1001, 4000, 7999, 8001, 127999, 128000, 128001, 1 << 20}
	f.req.Need = needs[rng.IntN(len(needs))]
	for _, t := range m.Targets {
		if rng.IntN(3) == 0 {
			f.inexpressible[t.Backend] = true
		}
	}
	if f.req.Family == config.FamilyResponses && rng.IntN(2) == 0 {
		// A continued response: its owner serves Responses natively and is
		// not drained (extproc previousOwner refuses anything else).
		var owners []string
		for _, t := range m.Targets {
			if b, _ := cfg.Backend(t.Backend); b.Serves(config.FamilyResponses) && t.Weight > 0 {
				owners = append(owners, t.Backend)
			}
		}
		if len(owners) > 0 {
			f.req.Pinned = owners[rng.IntN(len(owners))]
		}
	}
	return f
}

var errInexpressible = errors.New("inexpressible")

// TestChooseNamesAPlannedCluster: over generated configs and requests,
// every choice names a cluster Plan produced for the model, the chosen
// backends are exactly that cluster's targets that fit, and they are
// exactly the targets an independent reading of the rules allows; every
// refusal is the one those rules give.
func TestChooseNamesAPlannedCluster(t *testing.T) {
	chosen := 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 26))
		y := genConfig(rng)
		cfg, err := config.Parse([]byte(y), "gen.yaml", config.Options{SkipSecrets: true})
		if err != nil {
			t.Fatalf("seed %d: generated config invalid: %v\n%s", seed, err, y)
		}
		plan := map[string]Pool{}
		for _, p := range Plan(cfg) {
			name := p.Cluster()
			if _, dup := plan[name]; dup {
				t.Fatalf("seed %d: cluster %s planned twice\n%s", seed, name, y)
			}
			if len(p.Targets) == 0 {
				t.Fatalf("seed %d: cluster %s has no targets\n%s", seed, name, y)
			}
			plan[name] = p
		}
		for i := range cfg.Models {
			m := &cfg.Models[i]
			for range 40 {
				f := genFacts(rng, cfg, m)
				if checkChoice(t, cfg, m, f, plan) {
					chosen++
				}
				if t.Failed() {
					t.Fatalf("seed %d, model %s, request %+v, inexpressible %v\n%s", seed, m.Name, f.req, f.inexpressible, y)
				}
			}
		}
	}
	if chosen < 1000 {
		t.Errorf("only %d requests routed: the generator rarely exercises a choice", chosen)
	}
}

// checkChoice checks one request; it reports whether a cluster was chosen.
func checkChoice(t *testing.T, cfg *config.Config, m *config.Model, f facts, plan map[string]Pool) bool {
	t.Helper()
	req := f.req
	calls := 0
	translatable := func(bs []*config.Backend, native bool) error {
		calls++
		for _, b := range bs {
			if reach, nat := takes(b, req.Family); !reach || nat {
				t.Errorf("Translatable asked about %s, which does not take %s only translated", b.Name, req.Family)
			}
			if f.inexpressible[b.Name] {
				return errInexpressible
			}
		}
		return nil
	}
	ch, ref := Choose(cfg, m, req, translatable, nil)

	// The oracle: which targets take the family, natively or translated.
	speaks, translated, refused := 0, 0, false
	for _, t := range m.Targets {
		b, _ := cfg.Backend(t.Backend)
		reach, native := takes(b, req.Family)
		switch {
		case native:
			speaks++
		case reach:
			translated++
			refused = refused || (!req.Untranslated && f.inexpressible[t.Backend])
		}
	}
	nativeOnly := req.Untranslated || refused
	var allowed, fit []string
	drained := 0
	for _, t := range m.Targets {
		b, _ := cfg.Backend(t.Backend)
		reach, native := takes(b, req.Family)
		if !reach || (nativeOnly && !native) || (req.Pinned != "" && t.Backend != req.Pinned) {
			continue
		}
		// A drained target (weight 0) serves nothing: its cluster gives it
		// no locality.
		if t.Weight <= 0 {
			drained++
			continue
		}
		allowed = append(allowed, t.Backend)
		if t.ContextWindow == 0 || t.ContextWindow >= req.Need {
			fit = append(fit, t.Backend)
		}
	}
	if want := !req.Untranslated && translated > 0; (calls > 0) != want || calls > 1 {
		t.Errorf("Translatable called %d times, want it once exactly when some targets translate", calls)
	}

	if ref != nil {
		var want Reason
		switch {
		case nativeOnly && speaks == 0 && refused:
			want = Untranslatable
		case speaks+translated == 0 || (nativeOnly && speaks == 0):
			want = NoBackend
		case len(allowed) == 0 && drained > 0:
			want = Drained
		case len(fit) == 0:
			want = ContextTooLong
		}
		if ref.Reason != want {
			t.Errorf("refused %v (%v), want reason %v", ref.Reason, ref, want)
		}
		if want == Untranslatable && !errors.Is(ref, errInexpressible) {
			t.Errorf("untranslatable refusal without its cause: %v", ref)
		}
		if want == ContextTooLong && ref.MaxWindow != maxWindow(m.Targets) {
			t.Errorf("MaxWindow %d, want %d", ref.MaxWindow, maxWindow(m.Targets))
		}
		return false
	}
	if len(fit) == 0 {
		t.Fatalf("chose %s, but no target can serve the request", ch.Cluster())
	}
	p, ok := plan[ch.Cluster()]
	if !ok {
		t.Fatalf("chose %s, which Plan did not produce", ch.Cluster())
	}
	if p.Pool != ch.Pool || p.Model != m {
		t.Errorf("chose %+v, planned %+v for model %s", ch.Pool, p.Pool, p.Model.Name)
	}
	var inCluster []string
	serving := 0
	for _, t := range p.Targets {
		if t.Weight <= 0 {
			continue
		}
		serving++
		if t.ContextWindow == 0 || t.ContextWindow >= req.Need {
			inCluster = append(inCluster, t.Backend)
		}
	}
	if !slices.Equal(ch.Backends, inCluster) {
		t.Errorf("backends %v, the cluster's targets that fit %v", ch.Backends, inCluster)
	}
	if !slices.Equal(ch.Backends, fit) {
		t.Errorf("backends %v, the rules allow %v", ch.Backends, fit)
	}
	if p.Backend == "" && serving != len(ch.Backends) {
		// Retries stay in the cluster: none may land on a target too small.
		t.Errorf("cluster %s serves with %d targets, only %d fit", ch.Cluster(), serving, len(ch.Backends))
	}
	if want := !nativeOnly && translated > 0; ch.Translated != want {
		t.Errorf("Translated %v, want %v", ch.Translated, want)
	}
	return true
}
