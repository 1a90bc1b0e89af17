package upstream

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
)

// ServerConfig is one upstream xDS server.
type ServerConfig struct {
	// URI is the gRPC target, e.g. "127.0.0.1:18000" or "dns:///cp.example:18000".
	URI string
	// Mode, when not ModeAuto, forces the protocol spoken to this server,
	// overriding Config.Mode.
	Mode Mode
	// Creds are the transport credentials of connections to this server
	// (TLS, mTLS). nil: plaintext.
	Creds credentials.TransportCredentials
	// CallCreds are sent with every stream to this server (e.g. a bearer
	// token, gRFC A97). grpc sends them over secure transports only.
	CallCreds []credentials.PerRPCCredentials
}

// Mode selects the xDS protocol variant spoken to the servers.
type Mode int

const (
	// ModeAuto tries Delta first and falls back to SotW, for that server and
	// for the lifetime of the Client, when the server answers the Delta stream
	// with codes.Unimplemented.
	ModeAuto Mode = iota
	// ModeSotW speaks state-of-the-world xDS only.
	ModeSotW
	// ModeDelta speaks incremental xDS only.
	ModeDelta
)

// String returns "auto", "sotw" or "delta".
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeSotW:
		return "sotw"
	case ModeDelta:
		return "delta"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// MarshalText encodes m as its String form (used by JSON status output).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Default values of Config fields.
const (
	// DefaultPrimaryRetryInterval is how often a Client connected to a
	// fallback server checks whether an earlier server is reachable again.
	DefaultPrimaryRetryInterval = 10 * time.Second

	// MaxRecvMsgSize is the largest response accepted from an upstream.
	MaxRecvMsgSize = 64 << 20

	// Keepalive as in grpc-go's own xDS client: a default gRPC server
	// (keepalive enforcement MinTime 5 min) closes connections that ping
	// more often with "too_many_pings".
	keepaliveTime    = 5 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

// backoffConfig is the reconnect backoff: 100 ms × 1.6^attempt, at most 30 s,
// ±20 % jitter, in grpc's own terms (its default starts at 1 s and stops at
// 120 s, too slow for a control plane that restarts).
//
// The schedule stays ours rather than grpc's ConnectParams on one ClientConn
// per server, because grpc's backoff does not cover what the relay must pace:
//   - it paces the reconnection of a transport, while xDS needs a pause
//     between streams too: a server that accepts the connection but fails
//     the stream, or ends it before any response, leaves the channel READY
//     and a new stream would start at once, in a loop (grpc-go's own xDS
//     client keeps a stream backoff of its own for this reason);
//   - fallback (gRFC A71) is a schedule across servers: the next server at
//     once after a failure, the first one again after a pause only when the
//     last one failed too, back to zero once a response arrived; per-channel
//     backoffs cannot express it;
//   - grpc exports only these parameters (backoff.Config); its schedule
//     (internal/backoff) cannot be imported.
//
// A fresh ClientConn per attempt keeps grpc's reconnect backoff out of the
// way of this one.
var backoffConfig = backoff.Config{
	BaseDelay:  100 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   30 * time.Second,
}

// Config configures a Client. The zero value of every optional field is a
// documented default.
type Config struct {
	// Authority names the authority this client serves; "" for the default
	// servers. Used in logs and Status only.
	Authority string
	// Servers are tried in order; at least one is required.
	Servers []ServerConfig
	// Node is the relay's own node. It is sent on the first request of every
	// stream, never a downstream client's node.
	Node *corev3.Node
	// Mode selects SotW, Delta, or Delta with fallback to SotW (the default).
	Mode Mode
	// Eager connects at once and keeps a stream open while nothing is
	// subscribed, so that the server's reachability is known (and reported
	// to the Handler) before the first subscription. Default false: nothing
	// is dialled before the first Subscribe.
	Eager bool
	// Backoff returns the wait before reconnect attempt number attempt
	// (0-based). nil: DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// PrimaryRetryInterval is how often, while connected to a fallback server,
	// the earlier servers are probed. 0: DefaultPrimaryRetryInterval.
	PrimaryRetryInterval time.Duration
	// InitialVersions, when set, returns the resource versions the relay
	// already holds for typeURL (name → version). They are sent as
	// initial_resource_versions on the first Delta request of each stream so
	// that the server does not resend them. Called from the stream's sender
	// goroutine without any Client lock held, possibly while a Handler method
	// runs on the run goroutine: it must be safe for concurrent use.
	InitialVersions func(typeURL string) map[string]string
	// Declared, when set, is told the names a Delta stream's first request
	// of typeURL declares in initial_resource_versions (perhaps none),
	// before it is sent: those the request subscribes to, by name or the
	// wildcard. The server now knows the relay holds them and says when they
	// are gone; of anything else it knows nothing. Called like
	// InitialVersions.
	Declared func(typeURL string, names []string)
	// ResyncAfter is the least time between two new streams the client
	// starts to ask the server again (Client.Resync), so that names in doubt
	// are asked together and a server that never answers meets no loop.
	// 0: DefaultResyncAfter.
	ResyncAfter time.Duration
	// OnResync, when set, is told when the client starts a new stream to
	// ask the server again, and why (ResyncDoesNotExist, ResyncWildcard,
	// ResyncGlob, ResyncRejected), for metrics.
	OnResync func(reason string)
	// OnPanic, when set, is told when the Handler panicked applying an
	// update of typeURL (the update is rejected: handle.go), for metrics.
	OnPanic func(typeURL string)
	// OnNACK, when set, is told of every response of typeURL the client
	// NACKs (invalid, or rejected by the Handler), for metrics. Called with
	// the client's lock held: it must not call the Client.
	OnNACK func(typeURL string)
	// Settle is how long the server may say nothing after the relay's last
	// request before an unproven wildcard, or a type's first request on a
	// stream, counts as answered (settle.go). 0: DefaultSettle.
	Settle time.Duration
	// DialOptions are appended to the defaults (the server's Creds or
	// insecure credentials, its CallCreds, keepalive ping after 5 min idle with a 20 s
	// timeout, 64 MiB receive limit), so they can override them.
	DialOptions []grpc.DialOption
	// Logger receives lifecycle logs at Info and per-message logs at Debug.
	// nil: zap.NewNop().
	Logger *zap.Logger
}

// DefaultBackoff is the reconnect backoff used when Config.Backoff is nil:
// backoffConfig, computed as grpc's exponential strategy does.
func DefaultBackoff(attempt int) time.Duration {
	c := backoffConfig
	d := float64(c.BaseDelay) * math.Pow(c.Multiplier, float64(max(attempt, 0)))
	d = min(d, float64(c.MaxDelay))
	d *= 1 + c.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
