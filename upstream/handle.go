package upstream

import (
	"fmt"

	"go.uber.org/zap"
)

// handle hands u to the Handler, one update at a time.
func (c *Client) handle(u Update) error {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.handleLocked(u)
}

// handleLocked hands u to the Handler; c.hmu is held. A panic in the
// Handler — a bug applying an upstream response — must not end the process:
// it is recovered, logged with its stack, counted (Config.OnPanic) and
// returned as an error, so that the response is NACKed like an invalid one
// and the stream keeps working.
func (c *Client) handleLocked(u Update) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("applying an upstream update panicked: rejecting it", zap.String("type", u.TypeURL),
				zap.Int("event", int(u.Event)), zap.Any("panic", p), zap.Stack("stack"))
			if c.cfg.OnPanic != nil {
				c.cfg.OnPanic(u.TypeURL)
			}
			err = fmt.Errorf("upstream: the relay failed to apply the %s response (internal error)", u.TypeURL)
		}
	}()
	return c.h.OnUpdate(u)
}
