package downstream

import (
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/internal/episodes"
)

// Client lifecycle lines (connect, disconnect, NACK) are at Info with the
// node id, sampled per message: the first clientLinesFirst each second, then
// every clientLinesThereafter-th, so 10,000 clients reconnecting at once
// write tens of lines, not 10,000.
const (
	clientLinesFirst      = 10
	clientLinesThereafter = 1000
)

// heldQuiet ends an episode of removals held back (of one type, for one
// reason) once no stream has started holding one back for this long.
const heldQuiet = 10 * time.Second

// serverLogs are the server's loggers for events that come per client.
type serverLogs struct {
	clients *zap.Logger   // sampled: connect, disconnect, NACK
	held    *episodes.Log // removals held back, one line per episode
}

func newServerLogs(log *zap.Logger) serverLogs {
	sampled := log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, clientLinesFirst, clientLinesThereafter)
	}))
	return serverLogs{clients: sampled, held: episodes.New(log, heldQuiet)}
}

// logConnected logs a stream's client at its first request.
func (st *stream) logConnected(node string) {
	st.srv.logs.clients.Info("client connected", zap.Uint64("stream", st.id), zap.String("node", node),
		zap.String("protocol", st.proto), zap.String("service", st.typeURL), zap.String("peer", st.peer))
}

// logDisconnected logs the end of a stream that had presented a node.
func (st *stream) logDisconnected(err error) {
	st.mu.Lock()
	node, bound := st.nodeID, st.node != nil
	st.mu.Unlock()
	if !bound {
		return
	}
	st.srv.logs.clients.Info("client disconnected", zap.Uint64("stream", st.id), zap.String("node", node),
		zap.String("protocol", st.proto), zap.String("peer", st.peer), zap.NamedError("cause", err))
}

// logNACK logs a client's NACK of the response of nonce. Called with mu held.
func (st *stream) logNACK(ts *typeState, typeURL, nonce, reason string) {
	version := ""
	if nonce == ts.lastNonce {
		version = ts.sentVersion
	}
	st.srv.logs.clients.Info("client NACKed a response", zap.Uint64("stream", st.id), zap.String("node", st.nodeID),
		zap.String("type", typeURL), zap.String("version", version), zap.String("nonce", nonce),
		zap.String("error", reason))
}

// logHeld logs that a removal is held back from a stream, once per episode
// over all streams: the first in full, then a summary with the count.
func (st *stream) logHeld(typeURL, reason string) {
	st.srv.logs.held.Warn(typeURL+" "+reason, "holding back a removal: "+withholdReasons[reason],
		zap.Uint64("stream", st.id), zap.String("node", st.nodeID), zap.String("type", typeURL),
		zap.String("reason", reason))
}
