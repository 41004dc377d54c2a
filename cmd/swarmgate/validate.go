package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/swarmgate/swarmgate/internal/config"
)

func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	skip := fs.Bool("skip-secrets", false, "do not resolve env:/file: secrets (check on a machine without them)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swarmgate validate [--skip-secrets] FILE\n\nChecks a config file. Exit 0 when valid; otherwise prints file:line: field: reason.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	cfg, err := config.Load(fs.Arg(0), config.Options{SkipSecrets: *skip})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (%d backends, %d models, %d tenants)\n", fs.Arg(0), len(cfg.Backends), len(cfg.Models), len(cfg.Tenants))
	return nil
}

func runHashKey(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("hash-key", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swarmgate hash-key < keyfile\n\nReads one virtual key from stdin and prints its sha256: hash for tenants[].keys[].hash.")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("reading key: %w", err)
	}
	key := strings.TrimRight(line, "\r\n")
	if key == "" {
		return fmt.Errorf("no key on stdin")
	}
	fmt.Fprintln(stdout, config.HashKey(key))
	return nil
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "swarmgate", version)
	return nil
}
