// Package episodes logs a recurring event once per episode instead of once
// per occurrence: the first occurrence in full, then, once the event has not
// recurred for a quiet period (or at Flush), one summary line with how many
// occurrences the episode had. A warm restart that holds back removals on
// 150 streams, or a drain that closes 10,000 connections, is then two lines.
//
// All methods are safe for concurrent use. Lines are written without the
// lock held.
package episodes

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Log logs episodes of recurring events, keyed by the caller (e.g. type and
// reason). Create it with New; Close ends it.
type Log struct {
	// set at creation, read-only
	log   *zap.Logger
	quiet time.Duration

	mu     sync.Mutex
	open   map[string]*episode // guarded by mu
	closed bool                // guarded by mu
}

// episode is one open episode of a key.
type episode struct {
	msg   string
	start time.Time
	last  time.Time
	count int
	timer *time.Timer
}

// New returns a Log writing to log (nil: nothing) that ends an episode once
// its event has not recurred for quiet.
func New(log *zap.Logger, quiet time.Duration) *Log {
	if log == nil {
		log = zap.NewNop()
	}
	return &Log{log: log, quiet: quiet, open: make(map[string]*episode)}
}

// Warn notes an occurrence of key's event. The first of an episode is logged
// at Warn with msg and fields; the others are only counted.
func (l *Log) Warn(key, msg string, fields ...zap.Field) {
	now := time.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	if ep := l.open[key]; ep != nil {
		ep.count++
		ep.last = now
		l.mu.Unlock()
		return
	}
	ep := &episode{msg: msg, start: now, last: now, count: 1}
	ep.timer = time.AfterFunc(l.quiet, func() { l.expire(key, ep) })
	l.open[key] = ep
	l.mu.Unlock()
	l.log.Warn(msg, append(fields, zap.String("episode", "first of an episode: any more are counted in one summary line when it ends"))...)
}

// expire ends ep if its event has been quiet long enough, or waits again.
func (l *Log) expire(key string, ep *episode) {
	l.mu.Lock()
	if l.open[key] != ep {
		l.mu.Unlock()
		return
	}
	if wait := l.quiet - time.Since(ep.last); wait > 0 {
		ep.timer.Reset(wait)
		l.mu.Unlock()
		return
	}
	delete(l.open, key)
	l.mu.Unlock()
	l.summarize(key, ep)
}

// summarize writes the summary line of an ended episode of more than one
// occurrence (the first line says all there is to say of one).
func (l *Log) summarize(key string, ep *episode) {
	if ep.count < 2 {
		return
	}
	l.log.Warn(ep.msg+" (episode ended)", zap.String("episode_key", key), zap.Int("count", ep.count),
		zap.Duration("duration", ep.last.Sub(ep.start)))
}

// Flush ends every open episode now, writing their summaries.
func (l *Log) Flush() {
	l.mu.Lock()
	eps := l.open
	l.open = make(map[string]*episode)
	l.mu.Unlock()
	for key, ep := range eps {
		ep.timer.Stop()
		l.summarize(key, ep)
	}
}

// Close flushes the open episodes; later occurrences are dropped.
func (l *Log) Close() {
	l.Flush()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}
