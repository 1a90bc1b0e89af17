package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The smoke tests' measured children (the TCP writer, the gRPC floor)
	// are this test binary: run starts os.Executable.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if code, ok := childCommand(ctx, os.Args[1:]); ok {
		stop()
		os.Exit(code)
	}
	stop()
	goleak.VerifyTestMain(m)
}
