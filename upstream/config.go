package upstream

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
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

	backoffBase   = 100 * time.Millisecond
	backoffFactor = 1.6
	backoffMax    = 30 * time.Second
	backoffJitter = 0.2
)

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
	// (0-based). nil: jittered exponential, 100 ms base, x1.6, 30 s cap, ±20 %.
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
	// DialOptions are appended to the defaults (the server's Creds or
	// insecure credentials, its CallCreds, keepalive ping after 5 min idle with a 20 s
	// timeout, 64 MiB receive limit), so they can override them.
	DialOptions []grpc.DialOption
	// Logger receives lifecycle logs at Info and per-message logs at Debug.
	// nil: zap.NewNop().
	Logger *zap.Logger
}

// DefaultBackoff is the reconnect backoff used when Config.Backoff is nil:
// 100 ms × 1.6^attempt, capped at 30 s, with ±20 % jitter.
func DefaultBackoff(attempt int) time.Duration {
	d := float64(backoffBase) * math.Pow(backoffFactor, float64(max(attempt, 0)))
	d = min(d, float64(backoffMax))
	d *= 1 + backoffJitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
