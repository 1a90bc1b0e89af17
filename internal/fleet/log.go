package fleet

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewConsoleLogger returns a console-format zap logger writing to w at the
// given level (debug, info, warn or error).
func NewConsoleLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("fleet: log level %q: %w", level, err)
	}
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// gcpLogger adapts zap to go-control-plane's log.Logger. go-control-plane logs
// every watch at Debug and Info, with whole version maps; that would drown the
// one line per change at Debug, so only its warnings and errors are kept.
type gcpLogger struct{ s *zap.SugaredLogger }

func (l gcpLogger) Debugf(string, ...any)             {}
func (l gcpLogger) Infof(string, ...any)              {}
func (l gcpLogger) Warnf(format string, args ...any)  { l.s.Warnf(format, args...) }
func (l gcpLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
