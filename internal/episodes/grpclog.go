package episodes

import (
	"fmt"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapgrpc"
	"google.golang.org/grpc/grpclog"
)

// connectionClosing are the parts of grpc warnings written once per stream or
// connection that a closing connection ends: a drain or a restart ends every
// connection at once.
var connectionClosing = []string{
	"transport is closing",
	"failed to write status",
	"use of closed network connection",
}

// grpcLogger is grpc's logger over zap whose warnings about closing
// connections are logged once per episode.
type grpcLogger struct {
	*zapgrpc.Logger
	eps *Log
}

// GRPCLogger returns a logger for grpclog.SetLoggerV2 that writes to log
// (warnings and above, as zapgrpc does) and writes grpc's per-connection
// warnings about closing connections through eps, as one episode.
func GRPCLogger(log *zap.Logger, eps *Log) grpclog.LoggerV2 {
	return &grpcLogger{Logger: zapgrpc.NewLogger(log), eps: eps}
}

// ClosingKey is the episode key of grpc's warnings about closing
// connections.
const ClosingKey = "grpc-connection-closing"

func (g *grpcLogger) warn(msg string) {
	for _, s := range connectionClosing {
		if strings.Contains(msg, s) {
			g.eps.Warn(ClosingKey, "grpc: streams ended by closing connections (a drain, a restart or clients leaving)",
				zap.String("example", msg))
			return
		}
	}
	g.Logger.Warning(msg)
}

// Warning implements grpclog.LoggerV2.
func (g *grpcLogger) Warning(args ...any) { g.warn(fmt.Sprint(args...)) }

// Warningln implements grpclog.LoggerV2.
func (g *grpcLogger) Warningln(args ...any) { g.warn(strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }

// Warningf implements grpclog.LoggerV2.
func (g *grpcLogger) Warningf(format string, args ...any) { g.warn(fmt.Sprintf(format, args...)) }
