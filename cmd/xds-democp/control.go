package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// serveControl serves srv's control endpoint (fleet.Server.ControlHandler:
// POST /change?type=cds&count=1) on addr. The returned stop function shuts
// the endpoint down and waits for it.
func serveControl(addr string, srv *fleet.Server, log *zap.Logger) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("democp: control listen: %w", err)
	}
	hs := &http.Server{Handler: srv.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("control endpoint", zap.Error(err))
		}
	}()
	log.Info("control endpoint", zap.String("listen", lis.Addr().String()))
	return func() {
		_ = hs.Close()
		<-done
	}, nil
}
