// Command loadgen load-tests an ext_proc server as Envoy drives it for
// swarmgate (package test/bench/loadgen).
//
//	loadgen run   --target swarmgate|baseline [--addr host:port] [flags] -o result.json
//	loadgen serve --target swarmgate|baseline|baseline-plain [--listen 127.0.0.1:0] [--cpuprofile f]
//	loadgen compare [flags] [--pairs n] [--floor baseline|baseline-plain] -o comparison.json
//	loadgen table comparison.json...
//	loadgen chart -o chart.svg [--title t] result.json|comparison.json...
//
// Without --addr, run starts the server as a child process of this binary
// ("serve") so its CPU time and peak RSS are measured alone. compare starts
// both servers and alternates short slices between them (loadgen.Compare).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"google.golang.org/grpc/credentials"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/swarmgate/swarmgate/test/bench/loadgen"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen run|compare|table|serve|chart [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "compare":
		err = compare(os.Args[2:])
	case "table":
		err = table(os.Args[2:])
	case "chart":
		err = chart(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// loadFlags are the flags that describe the load and the server child,
// shared by run and compare.
type loadFlags struct {
	streams, conns, reqBytes, respBytes, chunkBytes int
	rate                                            float64
	kind                                            string
	chunkInterval, warmup, duration                 time.Duration
	rename                                          bool
	workers                                         uint
}

func (l *loadFlags) register(fs *flag.FlagSet, warmup, duration time.Duration) {
	fs.IntVar(&l.streams, "streams", 64, "concurrent requests (router-level streams)")
	fs.IntVar(&l.conns, "conns", 2, "gRPC connections (Envoy: one per worker thread)")
	fs.Float64Var(&l.rate, "rate", 0, "requests per second; 0 = closed loop")
	fs.StringVar(&l.kind, "kind", "sse", "response kind: json or sse")
	fs.IntVar(&l.reqBytes, "req-bytes", 4096, "request body size")
	fs.IntVar(&l.respBytes, "resp-bytes", 2048, "response body size")
	fs.IntVar(&l.chunkBytes, "chunk-bytes", 0, "response chunk size (0: one SSE event per chunk, 16 KiB JSON)")
	fs.DurationVar(&l.chunkInterval, "chunk-interval", 0, "pause between response chunks")
	fs.BoolVar(&l.rename, "rename", false, "upstream model differs from the alias (per-attempt body rewrite)")
	fs.DurationVar(&l.warmup, "warmup", warmup, "warm-up before measuring")
	fs.DurationVar(&l.duration, "duration", duration, "measured window")
	fs.UintVar(&l.workers, "stream-workers", 0, "server: grpc.NumStreamWorkers (0: a goroutine per stream, grpc-go's default)")
}

func (l *loadFlags) options() loadgen.Options {
	return loadgen.Options{Streams: l.streams, Conns: l.conns, Rate: l.rate,
		Scenario: loadgen.Scenario{Kind: l.kind, RequestBytes: l.reqBytes, ResponseBytes: l.respBytes, ChunkBytes: l.chunkBytes, RenameModel: l.rename},
		Warmup:   l.warmup, Duration: l.duration, ChunkInterval: l.chunkInterval}
}

// startServer runs this binary's serve command for target as a child.
func startServer(ctx context.Context, target string, l *loadFlags, redis, cpuprofile, tlsDir string) (*loadgen.Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cargs := []string{"serve", "--target", target, "--listen", "127.0.0.1:0"}
	if l.rename {
		cargs = append(cargs, "--rename")
	}
	if redis != "" {
		cargs = append(cargs, "--redis", redis)
	}
	if cpuprofile != "" {
		cargs = append(cargs, "--cpuprofile", cpuprofile)
	}
	if l.workers > 0 {
		cargs = append(cargs, "--stream-workers", strconv.FormatUint(uint64(l.workers), 10))
	}
	if tlsDir != "" {
		cargs = append(cargs, "--tls-dir", tlsDir)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return loadgen.StartChild(sctx, exe, cargs...)
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var l loadFlags
	l.register(fs, 3*time.Second, 15*time.Second)
	target := fs.String("target", loadgen.TargetSwarmgate, "server to start: swarmgate or baseline (label with --addr)")
	addr := fs.String("addr", "", "drive this running server instead of starting one (CPU/RSS then need --pid)")
	pid := fs.Int("pid", 0, "with --addr: the server's process id")
	redis := fs.String("redis", "", "swarmgate target: Redis address for the ledger")
	cpuprofile := fs.String("server-cpuprofile", "", "write the server child's CPU profile here")
	out := fs.String("o", "", "write the JSON result here (default stdout)")
	_ = fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *addr == "" {
		child, err := startServer(ctx, *target, &l, *redis, *cpuprofile, "")
		if err != nil {
			return err
		}
		defer func() { _ = child.Stop(10 * time.Second) }()
		*addr, *pid = child.Addr, child.PID
	}
	opts := l.options()
	opts.Addr, opts.Label, opts.ServerPID = *addr, *target, *pid
	r, err := loadgen.Run(ctx, opts)
	if err != nil {
		return err
	}
	if *redis != "" {
		r.Label += "+redis-ledger"
	}
	fmt.Fprintf(os.Stderr, "%s %s streams=%d: %.0f req/s, msg p50 %.0fµs p99 %.0fµs p99.9 %.0fµs, req p99 %.0fµs, server CPU %.0fµs/req (%.2f cores), peak RSS %.0f MB, errors %d\n",
		r.Label, r.Scenario.Kind, r.Streams, r.RPS, r.Message.P50US, r.Message.P99US, r.Message.P999US, r.Request.P99US,
		r.Server.CPUPerRequestUS, r.Server.CPUCores, r.Server.PeakRSSMB, r.Errors)
	return writeJSON(*out, r)
}

// compare starts the baseline and swarmgate servers as children, keeps
// both up, and runs alternating slices against them (loadgen.Compare).
func compare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	var l loadFlags
	l.register(fs, time.Second, 3*time.Second)
	pairs := fs.Int("pairs", 10, "back-to-back (baseline, swarmgate) slices; --warmup and --duration are per slice")
	minRPS := fs.Float64("min-rps-ratio", 0.8, "throughput target: pairs at or above it are counted")
	maxP99 := fs.Float64("max-p99-ratio", 1.5, "message p99 target: pairs at or below it are counted")
	out := fs.String("o", "", "write the JSON comparison here (default stdout)")
	tlsCost := fs.Bool("tls-cost", false, "compare swarmgate over plaintext (baseline) with swarmgate over mutual TLS with a client allow-list (target)")
	floor := fs.String("floor", loadgen.TargetBaseline, "the do-nothing server: "+loadgen.TargetBaseline+" (swarmgate's codec) or "+loadgen.TargetBaselinePlain+" (grpc-go's)")
	_ = fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	targets := []string{*floor, loadgen.TargetSwarmgate}
	tlsDirs := []string{"", ""}
	var clientCreds credentials.TransportCredentials
	if *tlsCost {
		dir, err := os.MkdirTemp("", "loadgen-tls")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if clientCreds, err = loadgen.WriteTLS(dir); err != nil {
			return err
		}
		targets, tlsDirs = []string{loadgen.TargetSwarmgate, loadgen.TargetSwarmgate}, []string{"", dir}
	}
	var ends [2]loadgen.Endpoint
	for i, target := range targets {
		child, err := startServer(ctx, target, &l, "", "", tlsDirs[i])
		if err != nil {
			return err
		}
		defer func() { _ = child.Stop(10 * time.Second) }()
		ends[i] = loadgen.Endpoint{Label: target, Addr: child.Addr, PID: child.PID}
		if tlsDirs[i] != "" {
			ends[i].Label, ends[i].Creds = target+"+mtls", clientCreds
		}
	}
	c, err := loadgen.Compare(ctx, loadgen.CompareOptions{Baseline: ends[0], Target: ends[1], Load: l.options(), Pairs: *pairs})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s, %d pairs: req/s ratio median %.2f [%.2f-%.2f], %d of %d pairs >= %.2f, pooled %.2f; msg p99 ratio median %.2f (max %.2f), %d pairs <= %.2f; CPU ratio median %.2f\n",
		c.Point, len(c.Pairs), c.RPS.Median, c.RPS.Q1, c.RPS.Q3, c.AtLeast(*minRPS), len(c.Pairs), *minRPS, c.PooledRPS,
		c.P99.Median, c.P99.Max, c.P99AtMost(*maxP99), *maxP99, c.CPU.Median)
	return writeJSON(*out, c)
}

// table prints the Markdown table of comparison files.
func table(args []string) error {
	fs := flag.NewFlagSet("table", flag.ExitOnError)
	minRPS := fs.Float64("min-rps-ratio", 0.8, "throughput target")
	maxP99 := fs.Float64("max-p99-ratio", 1.5, "message p99 target")
	_ = fs.Parse(args)
	var cs []*loadgen.Comparison
	for _, p := range fs.Args() {
		var c loadgen.Comparison
		if err := readJSON(p, &c); err != nil {
			return err
		}
		cs = append(cs, &c)
	}
	fmt.Print(loadgen.ComparisonTable(cs, *minRPS, *maxP99))
	return nil
}

// readResults reads a run's result, or a comparison's median pair (both
// of its slices).
func readResults(path string) ([]*loadgen.Result, error) {
	var c loadgen.Comparison
	if err := readJSON(path, &c); err != nil {
		return nil, err
	}
	if len(c.Pairs) > 0 {
		m := c.MedianPair()
		return []*loadgen.Result{m.Baseline, m.Target}, nil
	}
	var r loadgen.Result
	if err := readJSON(path, &r); err != nil {
		return nil, err
	}
	return []*loadgen.Result{&r}, nil
}

func writeJSON(path string, v any) error {
	var w io.Writer = os.Stdout
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// serve runs a target until stdin closes or a signal arrives, printing
// its address first.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	target := fs.String("target", loadgen.TargetSwarmgate, "swarmgate or baseline")
	listen := fs.String("listen", "127.0.0.1:0", "listen address (loopback only)")
	rename := fs.Bool("rename", false, "upstream model differs from the alias")
	redis := fs.String("redis", "", "Redis address for the ledger (swarmgate)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile here on exit")
	workers := fs.Uint("stream-workers", 0, "grpc.NumStreamWorkers (0: a goroutine per stream)")
	tlsDir := fs.String("tls-dir", "", "serve mutual TLS with the certificates loadgen.WriteTLS wrote here (client allow-list and stream proof as `swarmgate serve`)")
	_ = fs.Parse(args)

	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errors.New("serve listens on a loopback address only")
	}
	topts := loadgen.TargetOptions{RenameModel: *rename, RedisAddr: *redis, StreamWorkers: uint32(*workers),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if *tlsDir != "" {
		if topts.Creds, topts.Proof, err = loadgen.ServerTLS(*tlsDir); err != nil {
			return err
		}
	}
	gs, cleanup, err := loadgen.NewTarget(*target, topts)
	if err != nil {
		return err
	}
	defer cleanup()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	go func() { _ = gs.Serve(lis) }()
	fmt.Printf("%s%s\n", loadgen.ListenPrefix, lis.Addr())

	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	gs.Stop()
	return nil
}

func chart(args []string) error {
	fs := flag.NewFlagSet("chart", flag.ExitOnError)
	out := fs.String("o", "latency.svg", "SVG output")
	title := fs.String("title", "ext_proc latency: swarmgate vs do-nothing baseline", "chart title")
	_ = fs.Parse(args)
	var rs []*loadgen.Result
	for _, p := range fs.Args() {
		got, err := readResults(p)
		if err != nil {
			return err
		}
		rs = append(rs, got...)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := loadgen.WriteSVG(f, *title, rs); err != nil {
		return err
	}
	fmt.Print(loadgen.Table(rs))
	return nil
}
