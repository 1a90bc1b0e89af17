package episodes_test

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/grpclog"

	"github.com/xds-relay/xds-relay/internal/episodes"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// A warm restart that holds back a removal on 150 streams (of two types) is
// one line per type, then one summary line per type with the count.
func TestEpisodeIsFirstLineAndSummary(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	eps := episodes.New(zap.New(obs), time.Hour)
	for i := range 150 {
		eps.Warn("clusters", "holding back a removal", zap.Int("stream", i))
		eps.Warn("listeners", "holding back a removal", zap.Int("stream", i))
	}
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines during the episode, want 2 (the first of each key): %v", n, logs.All())
	}
	eps.Close()
	summaries := logs.FilterMessage("holding back a removal (episode ended)").All()
	if len(summaries) != 2 {
		t.Fatalf("%d summary lines, want 2: %v", len(summaries), logs.All())
	}
	for _, s := range summaries {
		if got := s.ContextMap()["count"]; got != int64(150) {
			t.Errorf("summary %v: count %v, want 150", s.ContextMap(), got)
		}
	}
	eps.Warn("clusters", "holding back a removal") // after Close: dropped
	if n := logs.Len(); n != 4 {
		t.Errorf("%d lines in all, want 4", n)
	}
}

// An episode of one occurrence is one line; an episode ends by itself once
// its event has been quiet, and the next occurrence starts a new one.
func TestEpisodeEndsWhenQuiet(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	eps := episodes.New(zap.New(obs), 10*time.Millisecond)
	defer eps.Close()
	eps.Warn("k", "once")
	eps.Warn("k2", "twice")
	eps.Warn("k2", "twice")
	xdstest.Eventually(t, func() bool { return logs.FilterMessage("twice (episode ended)").Len() == 1 },
		"the summary after the quiet period", func() any { return logs.All() })
	eps.Warn("k2", "twice")
	if got := logs.FilterMessage("twice").Len(); got != 2 {
		t.Errorf("%d first lines of k2, want 2 (a new episode)", got)
	}
	if got := logs.FilterMessage("once (episode ended)").Len(); got != 0 {
		t.Errorf("a summary of a one-line episode was written")
	}
}

// A drain that closes 1,000 connections writes one grpc warning about it and,
// when it ends, one summary with the count; other grpc warnings pass through.
func TestGRPCClosingWarningsAreOneEpisode(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	eps := episodes.New(zap.New(obs), time.Hour)
	var l grpclog.LoggerV2 = episodes.GRPCLogger(zap.New(obs), eps)
	for range 1000 {
		// what grpc.Server writes through a component logger per stream
		l.Warningln("[core] ", "[Server #1]grpc: Server.processRPC failed to write status: connection error: desc = \"transport is closing\"")
	}
	l.Warningf("Adjusting keepalive ping interval to minimum period of %s", "1s")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines during the drain, want 2: %v", n, logs.All())
	}
	eps.Close()
	s := logs.FilterMessageSnippet("episode ended").All()
	if len(s) != 1 || s[0].ContextMap()["count"] != int64(1000) {
		t.Fatalf("summary lines %v, want one with count 1000", s)
	}
}
