// Command loadgen load-tests an ext_proc server as Envoy drives it for
// swarmgate (package test/bench/loadgen).
//
//	loadgen run   --target swarmgate|baseline [--addr host:port] [flags] -o result.json
//	loadgen serve --target swarmgate|baseline [--listen 127.0.0.1:0] [--cpuprofile f]
//	loadgen chart -o chart.svg [--title t] result.json...
//
// Without --addr, run starts the server as a child process of this binary
// ("serve") so its CPU time and peak RSS are measured alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
		fmt.Fprintln(os.Stderr, "usage: loadgen run|serve|chart [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
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

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	target := fs.String("target", loadgen.TargetSwarmgate, "server to start: swarmgate or baseline (label with --addr)")
	addr := fs.String("addr", "", "drive this running server instead of starting one (CPU/RSS then need --pid)")
	pid := fs.Int("pid", 0, "with --addr: the server's process id")
	streams := fs.Int("streams", 64, "concurrent requests (router-level streams)")
	conns := fs.Int("conns", 2, "gRPC connections (Envoy: one per worker thread)")
	rate := fs.Float64("rate", 0, "requests per second; 0 = closed loop")
	kind := fs.String("kind", "sse", "response kind: json or sse")
	reqBytes := fs.Int("req-bytes", 4096, "request body size")
	respBytes := fs.Int("resp-bytes", 2048, "response body size")
	chunkBytes := fs.Int("chunk-bytes", 0, "response chunk size (0: one SSE event per chunk, 16 KiB JSON)")
	chunkInterval := fs.Duration("chunk-interval", 0, "pause between response chunks")
	rename := fs.Bool("rename", false, "upstream model differs from the alias (per-attempt body rewrite)")
	redis := fs.String("redis", "", "swarmgate target: Redis address for the ledger")
	warmup := fs.Duration("warmup", 3*time.Second, "warm-up before measuring")
	duration := fs.Duration("duration", 15*time.Second, "measured window")
	cpuprofile := fs.String("server-cpuprofile", "", "write the server child's CPU profile here")
	workers := fs.Uint("stream-workers", 0, "server: grpc.NumStreamWorkers (0: a goroutine per stream, grpc-go's default)")
	out := fs.String("o", "", "write the JSON result here (default stdout)")
	_ = fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *addr == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cargs := []string{"serve", "--target", *target, "--listen", "127.0.0.1:0"}
		if *rename {
			cargs = append(cargs, "--rename")
		}
		if *redis != "" {
			cargs = append(cargs, "--redis", *redis)
		}
		if *cpuprofile != "" {
			cargs = append(cargs, "--cpuprofile", *cpuprofile)
		}
		if *workers > 0 {
			cargs = append(cargs, "--stream-workers", strconv.FormatUint(uint64(*workers), 10))
		}
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		child, err := loadgen.StartChild(sctx, exe, cargs...)
		cancel()
		if err != nil {
			return err
		}
		defer func() { _ = child.Stop(10 * time.Second) }()
		*addr, *pid = child.Addr, child.PID
	}
	r, err := loadgen.Run(ctx, loadgen.Options{Addr: *addr, Label: *target, Streams: *streams, Conns: *conns, Rate: *rate,
		Scenario: loadgen.Scenario{Kind: *kind, RequestBytes: *reqBytes, ResponseBytes: *respBytes, ChunkBytes: *chunkBytes, RenameModel: *rename},
		Warmup:   *warmup, Duration: *duration, ChunkInterval: *chunkInterval, ServerPID: *pid})
	if err != nil {
		return err
	}
	if *redis != "" {
		r.Label += "+redis-ledger"
	}
	fmt.Fprintf(os.Stderr, "%s %s streams=%d: %.0f req/s, msg p50 %.0fµs p99 %.0fµs p99.9 %.0fµs, req p99 %.0fµs, server CPU %.0fµs/req (%.2f cores), peak RSS %.0f MB, errors %d\n",
		r.Label, r.Scenario.Kind, r.Streams, r.RPS, r.Message.P50US, r.Message.P99US, r.Message.P999US, r.Request.P99US,
		r.Server.CPUPerRequestUS, r.Server.CPUCores, r.Server.PeakRSSMB, r.Errors)
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
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
	_ = fs.Parse(args)

	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errors.New("serve listens on a loopback address only")
	}
	gs, cleanup, err := loadgen.NewTarget(*target, loadgen.TargetOptions{RenameModel: *rename, RedisAddr: *redis, StreamWorkers: uint32(*workers),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r loadgen.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rs = append(rs, &r)
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
