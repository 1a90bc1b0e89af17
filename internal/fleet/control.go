package fleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// ChangeKind regenerates the next count resources of kind k (capped at the
// kind's count; count < 1 means 1) with a fresh creation stamp and publishes
// them, independently of the churn rotation of ChurnKinds. It shares Change's
// sequence numbers and per-kind cursors, so the two may be mixed.
func (s *Server) ChangeKind(k Kind, count int) (Change, error) {
	if k < 0 || k >= numKinds {
		return Change{}, fmt.Errorf("fleet: invalid kind %d", k)
	}
	count = max(count, 1)
	s.mu.Lock()
	s.seq++
	c := Change{Seq: s.seq, Kind: k, Created: time.Now()}
	n := s.cfg.Spec.Count(k)
	var changed []int
	for range min(count, n) {
		i := s.cursor[k]
		s.cursor[k] = (i + 1) % n
		c.Names = append(c.Names, s.cfg.Spec.Name(k, i))
		changed = append(changed, i)
	}
	// Under mu so that changes reach the cache in Seq order.
	err := s.publishLocked(k, changed, c.Created)
	s.mu.Unlock()
	if err != nil {
		return c, fmt.Errorf("fleet: change %d: %w", c.Seq, err)
	}
	if ce := s.log.Check(zap.DebugLevel, "change"); ce != nil {
		ce.Write(zap.Uint64("seq", c.Seq), zap.Stringer("type", c.Kind), zap.Strings("names", c.Names),
			zap.Int64("created_unix_nano", c.Created.UnixNano()))
	}
	return c, nil
}

// ChangeJSON is the JSON answer of the control handler's POST /change.
type ChangeJSON struct {
	Seq             uint64   `json:"seq"`
	Type            string   `json:"type"`
	Names           []string `json:"names"`
	CreatedUnixNano int64    `json:"created_unix_nano"`
}

// ControlHandler returns the HTTP handler of the control endpoint that load
// tools use to make changes on demand:
//
//	GET  /healthz                    200 "ok"
//	POST /change?type=cds&count=1    makes one change (ChangeKind); answers ChangeJSON
//
// type is lds, rds, cds or eds (default: the first churn kind); count
// defaults to 1. The handler is safe for concurrent use.
func (s *Server) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, req *http.Request) {
		k := s.cfg.ChurnKinds[0]
		if t := req.URL.Query().Get("type"); t != "" {
			kinds, err := ParseKinds(t)
			if err != nil || len(kinds) != 1 {
				http.Error(w, fmt.Sprintf("fleet: type %q: want one of lds, rds, cds, eds", t), http.StatusBadRequest)
				return
			}
			k = kinds[0]
		}
		count := 1
		if c := req.URL.Query().Get("count"); c != "" {
			n, err := strconv.Atoi(c)
			if err != nil || n < 1 {
				http.Error(w, fmt.Sprintf("fleet: count %q: want a positive integer", c), http.StatusBadRequest)
				return
			}
			count = n
		}
		c, err := s.ChangeKind(k, count)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ChangeJSON{Seq: c.Seq, Type: c.Kind.String(), Names: c.Names,
			CreatedUnixNano: c.Created.UnixNano()})
	})
	return mux
}
