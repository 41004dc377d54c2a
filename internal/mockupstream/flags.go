package mockupstream

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Flags are the command-line options of `swarmgate mock-upstream`.
type Flags struct {
	listen, auth, keys, models  string
	configFile, backend         string
	ttft, interToken, latency   time.Duration
	tokensPerChunk, completion  int
	cached, reasoning, rpm, tpm int
	failStatus                  int
	failProb                    float64
	seed                        uint64
	strict, h2c, toolCalls      bool
	toolScript                  map[string]string
}

// RegisterFlags defines the mock-upstream flags on fs. Call Options after
// fs.Parse.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.listen, "listen", "", "address to listen on (default: the backend's base_url host:port with --config, else 127.0.0.1:18101)")
	fs.StringVar(&f.auth, "auth", "", "credential header: bearer, x-api-key or api-key (default: the backend's, else bearer)")
	fs.StringVar(&f.keys, "keys", "", "accepted keys as ID=env:NAME or ID=file:PATH, comma separated (empty: any key)")
	fs.StringVar(&f.configFile, "config", "", "take auth and keys of --backend from this swarmgate config")
	fs.StringVar(&f.backend, "backend", "", "backend name in --config")
	fs.StringVar(&f.models, "models", "", "comma-separated model ids for GET /v1/models")
	fs.BoolVar(&f.strict, "strict-models", false, "answer 404 for models not in --models")
	fs.DurationVar(&f.ttft, "ttft", 0, "time to first token")
	fs.DurationVar(&f.interToken, "inter-token", 0, "delay between stream chunks")
	fs.DurationVar(&f.latency, "latency", 0, "extra delay before anything is sent")
	fs.IntVar(&f.tokensPerChunk, "tokens-per-chunk", 1, "completion tokens per SSE chunk")
	fs.IntVar(&f.completion, "completion-tokens", 16, "completion tokens when max_tokens asks for no fewer")
	fs.IntVar(&f.cached, "cached-tokens", 0, "report this many cached prompt tokens")
	fs.IntVar(&f.reasoning, "reasoning-tokens", 0, "report this many reasoning tokens")
	fs.IntVar(&f.rpm, "rpm", 0, "per-key requests per minute before 429 (0: unlimited)")
	fs.IntVar(&f.tpm, "tpm", 0, "per-key tokens per minute before 429 (0: unlimited)")
	fs.Float64Var(&f.failProb, "fail-prob", 0, "probability that a request fails with --fail-status")
	fs.IntVar(&f.failStatus, "fail-status", 500, "status of random failures")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the failure RNG")
	fs.BoolVar(&f.h2c, "h2c", false, "also serve cleartext HTTP/2")
	fs.BoolVar(&f.toolCalls, "tool-calls", false, "answer chat and Anthropic requests that declare tools with two parallel tool calls")
	fs.Func("tool-script", "TOOL=JSON: answer a request declaring TOOL (a Responses namespace's as NS.TOOL) with one call of it with these arguments, then text after its result; repeatable (lets an agent such as Claude Code or Codex finish a task)", func(v string) error {
		name, args, ok := strings.Cut(v, "=")
		var obj map[string]json.RawMessage
		if !ok || name == "" || json.Unmarshal([]byte(args), &obj) != nil {
			return fmt.Errorf("want TOOL={...JSON object of arguments...}, got %q", v)
		}
		if f.toolScript == nil {
			f.toolScript = map[string]string{}
		}
		f.toolScript[name] = args
		return nil
	})
	return f
}

// Options turns parsed flags into the listen address and Options. Secrets
// are resolved with lookupEnv (os.LookupEnv when nil).
func (f *Flags) Options(lookupEnv func(string) (string, bool)) (string, Options, error) {
	var o Options
	addr := f.listen
	if f.configFile != "" {
		if f.backend == "" {
			return "", o, errors.New("--config needs --backend")
		}
		c, err := config.Load(f.configFile, config.Options{LookupEnv: lookupEnv})
		if err != nil {
			return "", o, err
		}
		b, ok := c.Backend(f.backend)
		if !ok {
			return "", o, fmt.Errorf("backend %q is not in %s", f.backend, f.configFile)
		}
		o = OptionsFromBackend(b)
		if addr == "" {
			addr = net.JoinHostPort(b.Host(), strconv.Itoa(int(b.Port())))
		}
	}
	if addr == "" {
		addr = "127.0.0.1:18101"
	}
	if f.auth != "" {
		switch a := config.AuthStyle(f.auth); a {
		case config.AuthBearer, config.AuthXAPIKey, config.AuthAPIKey:
			o.Auth = a
		default:
			return "", o, fmt.Errorf("--auth %q: want bearer, x-api-key or api-key", f.auth)
		}
	}
	if f.keys != "" {
		keys, err := ParseKeys(f.keys, lookupEnv)
		if err != nil {
			return "", o, err
		}
		o.Keys = keys
	}
	if f.models != "" {
		o.Models = strings.Split(f.models, ",")
	}
	o.StrictModels, o.H2C, o.Seed, o.ToolCalls, o.ToolScript = f.strict, f.h2c, f.seed, f.toolCalls, f.toolScript
	o.TTFT, o.InterTokenDelay = f.ttft, f.interToken
	o.TokensPerChunk, o.CompletionTokens = f.tokensPerChunk, f.completion
	o.CachedTokens, o.ReasoningTokens = f.cached, f.reasoning
	o.Default = Behavior{RPM: f.rpm, TPM: f.tpm, Latency: f.latency, FailProbability: f.failProb, FailAction: ActError, Status: f.failStatus}
	return addr, o, nil
}

// ParseKeys parses "id=env:NAME,id2=file:PATH" and resolves each secret.
// Errors name the key id and reference, never a value.
func ParseKeys(spec string, lookupEnv func(string) (string, bool)) ([]Key, error) {
	var keys []Key
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, ref, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, errors.New("--keys: each entry must be ID=env:NAME or ID=file:PATH (inline keys are not accepted)")
		}
		s, err := config.ResolveSecret(ref, lookupEnv)
		if err != nil {
			return nil, fmt.Errorf("--keys: key %s: %w", id, err)
		}
		keys = append(keys, Key{ID: id, Value: s.Value()})
	}
	return keys, nil
}

// OptionsFromBackend returns Options that accept exactly the backend's keys
// (resolved secrets) with its auth style: a stand-in for that relay.
func OptionsFromBackend(b *config.Backend) Options {
	o := Options{Auth: b.Auth}
	for _, k := range b.Keys {
		o.Keys = append(o.Keys, Key{ID: k.ID, Value: k.Secret.Value()})
	}
	return o
}

// Command is `swarmgate mock-upstream`: it parses args, logs to stderr and
// serves until ctx ends. Wire it as the command's whole body.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mock-upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := RegisterFlags(fs)
	verbose := fs.Bool("v", false, "log every request (key ids only, never keys)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swarmgate mock-upstream [flags]\n\nServes a fake OpenAI-compatible provider for tests and `make run`.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return Serve(ctx, f, *verbose, stdout, stderr)
}

// Serve runs the mock the flags describe until ctx ends, logging to stderr
// (request lines only when verbose) and announcing its address on stdout:
// the body of `swarmgate mock-upstream`.
func Serve(ctx context.Context, f *Flags, verbose bool, stdout, stderr io.Writer) error {
	addr, opts, err := f.Options(nil)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	fmt.Fprintf(stdout, "mock upstream on %s (auth %s, %d keys)\n", addr, authOf(opts), len(opts.Keys))
	return Run(ctx, addr, opts)
}

func authOf(o Options) config.AuthStyle {
	if o.Auth == "" {
		return config.AuthBearer
	}
	return o.Auth
}
