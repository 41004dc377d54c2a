// Package litellm converts a LiteLLM proxy config (model_list,
// router_settings) into a swarmgate config, as docs/migration.md maps them.
// It is a starting point, not a migration tool: what has no equivalent is
// reported as a note, and the result always passes config.Parse.
package litellm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/swarmgate/swarmgate/internal/config"
)

// source is the part of a LiteLLM config that converts.
type source struct {
	ModelList []struct {
		ModelName string         `yaml:"model_name"`
		Params    map[string]any `yaml:"litellm_params"`
		Info      map[string]any `yaml:"model_info"`
		RPM       int            `yaml:"rpm"`
		TPM       int            `yaml:"tpm"`
	} `yaml:"model_list"`
	RouterSettings  map[string]any `yaml:"router_settings"`
	LitellmSettings map[string]any `yaml:"litellm_settings"`
}

// Result is the converted config and what the conversion could not carry.
type Result struct {
	YAML  []byte   // a swarmgate config (secrets as env: references)
	Notes []string // things to finish by hand, one sentence each
}

// Convert reads a LiteLLM proxy config and writes the equivalent swarmgate
// config. Inline API keys are never copied: they become env: references to
// fill in, with a note.
func Convert(data []byte) (Result, error) {
	var src source
	if err := yaml.Unmarshal(data, &src); err != nil {
		return Result{}, fmt.Errorf("litellm config: %w", err)
	}
	if len(src.ModelList) == 0 {
		return Result{}, errors.New("litellm config: model_list is empty")
	}
	c := &converter{backends: map[string]*backend{}}
	for i, d := range src.ModelList {
		if err := c.deployment(i, d.ModelName, d.Params, d.Info, d.RPM, d.TPM); err != nil {
			return Result{}, err
		}
	}
	out := c.document()
	c.router(out, src.RouterSettings, src.LitellmSettings)
	c.notef("LiteLLM virtual keys, teams and budgets live in its database: add tenants (keys hashed with `swarmgate hash-key`, limits, budget) before clients can call")

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return Result{}, err
	}
	if _, err := config.Parse(buf.Bytes(), "converted", config.Options{SkipSecrets: true}); err != nil {
		return Result{}, fmt.Errorf("converted config does not validate: %w", err)
	}
	return Result{YAML: buf.Bytes(), Notes: c.notes}, nil
}

type backend struct {
	name, baseURL, auth string
	keys                []map[string]any
	refs                map[string]bool // env references already used
}

type target struct {
	backend, model string
	priority       int
	weight         int
	price          map[string]any
	contextWindow  int
}

type converter struct {
	backends map[string]*backend // by base_url + auth
	order    []*backend
	models   []string
	targets  map[string][]*target
	notes    []string
	inline   int
}

func (c *converter) notef(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// deployment adds one model_list entry: its endpoint becomes (or joins) a
// backend, its key joins that backend's pool, and the alias gets a target.
func (c *converter) deployment(i int, alias string, p, info map[string]any, rpm, tpm int) error {
	if alias == "" {
		return fmt.Errorf("model_list[%d]: no model_name", i)
	}
	model, _ := p["model"].(string)
	if model == "" {
		return fmt.Errorf("model_list[%d] (%s): no litellm_params.model", i, alias)
	}
	provider, upstream, ok := strings.Cut(model, "/")
	if !ok {
		provider, upstream = "openai", model
	}
	apiBase, _ := p["api_base"].(string)
	auth := string(config.AuthBearer)
	var base string
	switch provider {
	case "openai", "hosted_vllm", "openai_compatible", "litellm_proxy":
		base = "https://api.openai.com/v1"
		if apiBase != "" {
			base = strings.TrimRight(apiBase, "/")
		}
	case "azure":
		if apiBase == "" {
			return fmt.Errorf("model_list[%d] (%s): azure without api_base", i, alias)
		}
		u, err := url.Parse(apiBase)
		if err != nil {
			return fmt.Errorf("model_list[%d] (%s): api_base: %w", i, alias, err)
		}
		base = u.Scheme + "://" + u.Host + "/openai/v1"
		auth = string(config.AuthAPIKey)
	default:
		if apiBase == "" {
			c.notef("model_list[%d] (%s): provider %q is not OpenAI-compatible; skipped (put an OpenAI-compatible relay in front of it and add it as a backend)", i, alias, provider)
			return nil
		}
		base = strings.TrimRight(apiBase, "/")
		c.notef("model_list[%d] (%s): provider %q converted as an OpenAI-compatible endpoint at %s; check that it speaks the OpenAI API", i, alias, provider, base)
	}

	key := base + "|" + auth
	b := c.backends[key]
	if b == nil {
		b = &backend{name: c.backendName(base), baseURL: base, auth: auth, refs: map[string]bool{}}
		c.backends[key] = b
		c.order = append(c.order, b)
	}
	if ref := c.secret(i, alias, p["api_key"]); !b.refs[ref] {
		b.refs[ref] = true
		k := map[string]any{"id": fmt.Sprintf("%s-%d", b.name, len(b.keys)+1), "secret": ref}
		if v := intOf(p["rpm"], rpm); v > 0 {
			k["rpm"] = v
		}
		if v := intOf(p["tpm"], tpm); v > 0 {
			k["tpm"] = v
		}
		b.keys = append(b.keys, k)
	}

	if c.targets == nil {
		c.targets = map[string][]*target{}
	}
	if _, seen := c.targets[alias]; !seen {
		c.models = append(c.models, alias)
	}
	for _, t := range c.targets[alias] {
		if t.backend == b.name {
			if t.model != upstream {
				c.notef("model_list[%d] (%s): %s already serves this alias as %q; %q dropped", i, alias, b.name, t.model, upstream)
			}
			return nil // another key of a target we have
		}
	}
	t := &target{backend: b.name, model: upstream, weight: intOf(p["weight"], 0)}
	if o := intOf(p["order"], 0); o > 0 {
		t.priority = o - 1 // LiteLLM's order starts at 1
	}
	in, out := floatOf(info["input_cost_per_token"], p["input_cost_per_token"]), floatOf(info["output_cost_per_token"], p["output_cost_per_token"])
	if in > 0 || out > 0 {
		t.price = map[string]any{"input_per_mtok": perMillion(in), "output_per_mtok": perMillion(out)}
	}
	t.contextWindow = intOf(info["max_input_tokens"], 0)
	c.targets[alias] = append(c.targets[alias], t)
	return nil
}

// secret turns api_key into a reference: os.environ/NAME → env:NAME; an
// inline key is not copied.
func (c *converter) secret(i int, alias string, v any) string {
	s, _ := v.(string)
	if name, ok := strings.CutPrefix(s, "os.environ/"); ok && name != "" {
		return "env:" + name
	}
	c.inline++
	name := fmt.Sprintf("LITELLM_KEY_%d", c.inline)
	if s == "" {
		c.notef("model_list[%d] (%s): no api_key; set %s to the key (or edit the reference)", i, alias, name)
	} else {
		c.notef("model_list[%d] (%s): an inline api_key was not copied; set %s to it", i, alias, name)
	}
	return "env:" + name
}

// backendName is the host's first label, made a valid, unique name.
func (c *converter) backendName(base string) string {
	name := "backend"
	if u, err := url.Parse(base); err == nil && u.Hostname() != "" {
		name = strings.Split(u.Hostname(), ".")[0]
		if u.Hostname() == "api.openai.com" {
			name = "openai"
		}
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name = strings.Trim(b.String(), "-_")
	if name == "" {
		name = "backend"
	}
	unique := name
	for n := 2; c.hasBackend(unique); n++ {
		unique = name + "-" + strconv.Itoa(n)
	}
	return unique
}

func (c *converter) hasBackend(name string) bool {
	for _, b := range c.order {
		if b.name == name {
			return true
		}
	}
	return false
}

func (c *converter) document() map[string]any {
	var backends []any
	for _, b := range c.order {
		m := map[string]any{"name": b.name, "base_url": b.baseURL, "keys": b.keys}
		if b.auth != string(config.AuthBearer) {
			m["auth"] = b.auth
		}
		backends = append(backends, m)
	}
	var models []any
	for _, alias := range c.models {
		ts := c.targets[alias]
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].priority < ts[j].priority })
		var targets []any
		for _, t := range ts {
			m := map[string]any{"backend": t.backend}
			if t.model != alias {
				m["model"] = t.model
			}
			if t.priority > 0 {
				m["priority"] = t.priority
			}
			if t.weight > 0 {
				m["weight"] = t.weight
			}
			if t.price != nil {
				m["price"] = t.price
			}
			if t.contextWindow > 0 {
				m["context_window"] = t.contextWindow
			}
			targets = append(targets, m)
		}
		models = append(models, map[string]any{"name": alias, "targets": targets})
	}
	return map[string]any{"backends": backends, "models": models}
}

// router maps router_settings and litellm_settings onto retry, breaker,
// request and redis.
func (c *converter) router(out map[string]any, rs, ls map[string]any) {
	get := func(k string) any {
		if v, ok := rs[k]; ok {
			return v
		}
		return ls[k]
	}
	if n := intOf(get("num_retries"), -1); n >= 0 {
		out["retry"] = map[string]any{"num_retries": n}
	}
	breaker := map[string]any{}
	if n := intOf(get("allowed_fails"), 0); n > 0 {
		breaker["consecutive_429"], breaker["consecutive_5xx"] = n, n
	}
	if s := floatOf(get("cooldown_time")); s > 0 {
		breaker["cooldown"] = seconds(s)
	}
	if len(breaker) > 0 {
		out["breaker"] = breaker
	}
	timeout := floatOf(rs["timeout"])
	if timeout == 0 {
		timeout = floatOf(ls["request_timeout"])
	}
	if timeout > 0 {
		out["request"] = map[string]any{"timeout": seconds(timeout)}
	}
	if host, _ := rs["redis_host"].(string); host != "" {
		port := intOf(rs["redis_port"], 6379)
		r := map[string]any{"addrs": []string{fmt.Sprintf("%s:%d", host, port)}}
		if pw, _ := rs["redis_password"].(string); pw != "" {
			if name, ok := strings.CutPrefix(pw, "os.environ/"); ok {
				r["password"] = "env:" + name
			} else {
				r["password"] = "env:LITELLM_REDIS_PASSWORD"
				c.notef("router_settings.redis_password was inline and not copied; set LITELLM_REDIS_PASSWORD")
			}
		}
		out["redis"] = r
	} else {
		c.notef("no router_settings.redis_host: swarmgate needs Redis (shared limits, breakers, ledger); set redis.addrs")
	}
	if s, _ := rs["routing_strategy"].(string); s == "latency-based-routing" {
		c.notef("routing_strategy latency-based-routing has no equivalent; targets are weighted")
	}
	for _, k := range []string{"fallbacks", "context_window_fallbacks", "model_group_alias"} {
		if get(k) != nil {
			c.notef("%s not converted: add the fallback model as a lower-priority target of the alias (docs/migration.md)", k)
		}
	}
}

func intOf(v any, def int) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	case string:
		if i, err := strconv.Atoi(n); err == nil {
			return i
		}
	}
	return def
}

// floatOf is the first numeric value among vs.
func floatOf(vs ...any) float64 {
	for _, v := range vs {
		switch n := v.(type) {
		case int:
			return float64(n)
		case float64:
			return n
		case string:
			if f, err := strconv.ParseFloat(n, 64); err == nil {
				return f
			}
		}
	}
	return 0
}

// perMillion turns a per-token price into per million tokens, rounded to
// 1e-9 so binary noise (2.5e-06 × 1e6) does not show.
func perMillion(perToken float64) float64 {
	return math.Round(perToken*1e6*1e9) / 1e9
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).String()
}
