package main

import (
	"context"
	"errors"
	"io"
)

// These commands are wired as their packages land.
var errNotWired = errors.New("not wired yet")

func runServe(context.Context, []string, io.Writer, io.Writer) error     { return errNotWired }
func runXDS(context.Context, []string, io.Writer, io.Writer) error       { return errNotWired }
func runExtProc(context.Context, []string, io.Writer, io.Writer) error   { return errNotWired }
func runRateLimit(context.Context, []string, io.Writer, io.Writer) error { return errNotWired }
func runBootstrap(context.Context, []string, io.Writer, io.Writer) error { return errNotWired }
