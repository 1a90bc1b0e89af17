package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// Latencies are propagation percentiles in milliseconds.
type Latencies struct {
	Samples uint64  `json:"samples"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

// ChangeLatencies are the propagation percentiles of one change: the
// updates that carried its creation stamp.
type ChangeLatencies struct {
	// CreatedUnixNano is the change's creation stamp (xds-democp's
	// POST /change answers it).
	CreatedUnixNano int64 `json:"created_unix_nano"`
	Latencies
}

// Rates are per second over the whole run.
type Rates struct {
	ResponsesPerSecond float64 `json:"responses_per_second"`
	UpdatesPerSecond   float64 `json:"updates_per_second"`
	BytesPerSecond     float64 `json:"bytes_per_second"`
}

// RunConfig is the configuration of a run, as the JSON summary records it.
type RunConfig struct {
	Target         string              `json:"target"`
	TLS            bool                `json:"tls"`
	MTLS           bool                `json:"mtls"`
	Clients        int                 `json:"clients"`
	StreamsPerConn int                 `json:"streams_per_conn"`
	RampPerSecond  float64             `json:"ramp_per_second"`
	Mode           Mode                `json:"mode"`
	Protocol       Protocol            `json:"protocol"`
	LDSName        string              `json:"lds_name,omitempty"`
	DurationMS     float64             `json:"duration_ms"`
	Updates        int64               `json:"updates"`
	SyncTimeoutMS  float64             `json:"sync_timeout_ms"`
	NACKRatio      float64             `json:"nack_ratio"`
	SlowRatio      float64             `json:"slow_ratio"`
	SlowDelayMS    float64             `json:"slow_delay_ms"`
	StuckRatio     float64             `json:"stuck_ratio,omitempty"`
	NodePrefix     string              `json:"node_prefix"`
	Node           NodeTemplate        `json:"node"`
	Params         []map[string]string `json:"params,omitempty"`
	AllowRemovals  bool                `json:"allow_removals"`
	LoadReport     bool                `json:"load_report,omitempty"`
}

func runConfig(c Config) RunConfig {
	rc := RunConfig{Target: c.Target, Clients: c.Clients, StreamsPerConn: c.StreamsPerConn, RampPerSecond: float64(c.Ramp),
		Mode: c.Mode, Protocol: c.Protocol, DurationMS: ms(c.Duration), Updates: c.Updates,
		SyncTimeoutMS: ms(c.SyncTimeout), NACKRatio: c.NACKRatio, SlowRatio: c.SlowRatio, SlowDelayMS: ms(c.SlowDelay),
		StuckRatio: c.StuckRatio,
		NodePrefix: c.NodePrefix, Node: c.Node, Params: c.Params, AllowRemovals: c.AllowRemovals, LoadReport: c.LoadReport}
	if c.Mode == ModeGRPC {
		rc.LDSName = c.LDSName
	}
	if c.TLS != nil {
		rc.TLS, rc.MTLS = true, c.TLS.CertFile != ""
	}
	return rc
}

// Summary is the final result of a run; --json prints it as JSON.
type Summary struct {
	// Config is the run's configuration; StartedAt and EndedAt its bounds.
	Config    RunConfig `json:"config"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`

	Target      string   `json:"target"`
	Mode        Mode     `json:"mode"`
	Protocol    Protocol `json:"protocol"`
	Clients     int      `json:"clients"`
	Connections int      `json:"connections"`
	// Synced counts clients that synced within --sync-timeout; Failed the others.
	Synced        int   `json:"synced"`
	Failed        int   `json:"failed"`
	ConnectErrors int64 `json:"connect_errors"`
	StreamErrors  int64 `json:"stream_errors"`
	Responses     int64 `json:"responses"`
	// Updates counts resources that changed or appeared after their client synced.
	Updates       int64     `json:"updates"`
	NACKs         int64     `json:"nacks_sent"`
	BytesReceived int64     `json:"bytes_received"`
	Propagation   Latencies `json:"propagation"`
	// Changes are the propagation of each change apart, by creation stamp
	// (the first 32 changes seen after the clients synced).
	Changes []ChangeLatencies `json:"changes,omitempty"`
	// TimeToSyncAllMS is from the first connection attempt to the last client's sync;
	// null when some client did not sync.
	TimeToSyncAllMS *float64 `json:"time_to_sync_all_ms"`
	// RunMS is the length of the whole run.
	RunMS float64 `json:"run_ms"`
	// Rates are the responses, updates and bytes received per second over
	// the run.
	Rates Rates `json:"rates"`
	// Losses counts resources clients held that the server said are gone
	// (see Loss); LossExamples lists the first ones.
	Losses       int64  `json:"losses"`
	LossExamples []Loss `json:"loss_examples,omitempty"`
	// LoadReports counts the load reports the clients sent (--lrs);
	// LRSErrors the LRS streams that failed or could not be opened.
	LoadReports int64 `json:"load_reports,omitempty"`
	LRSErrors   int64 `json:"lrs_errors,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMS(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// latencies summarizes a histogram.
func latencies(h *histogram) Latencies {
	return Latencies{
		Samples: h.Count(),
		P50:     ms(h.Quantile(0.50)),
		P90:     ms(h.Quantile(0.90)),
		P99:     ms(h.Quantile(0.99)),
		Max:     ms(h.Max()),
	}
}

// fmtDuration prints a duration with about three significant digits.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// fmtBytes prints a byte count in binary units.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// WriteTable prints the summary as an aligned two-column table.
func (s *Summary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("target", s.Target)
	row("mode / protocol", string(s.Mode)+" / "+string(s.Protocol))
	row("clients", s.Clients)
	row("connections", s.Connections)
	row("synced", s.Synced)
	row("failed", s.Failed)
	row("connect errors", s.ConnectErrors)
	row("stream errors", s.StreamErrors)
	row("responses received", s.Responses)
	row("updates received", s.Updates)
	row("nacks sent", s.NACKs)
	row("bytes received", fmt.Sprintf("%s (%d)", fmtBytes(s.BytesReceived), s.BytesReceived))
	p := s.Propagation
	row("propagation samples", p.Samples)
	row("propagation p50", fmtDuration(fromMS(p.P50)))
	row("propagation p90", fmtDuration(fromMS(p.P90)))
	row("propagation p99", fmtDuration(fromMS(p.P99)))
	row("propagation max", fmtDuration(fromMS(p.Max)))
	if s.TimeToSyncAllMS != nil {
		row("time to sync all", fmtDuration(fromMS(*s.TimeToSyncAllMS)))
	} else {
		row("time to sync all", "- (not all clients synced)")
	}
	row("run time", fmtDuration(fromMS(s.RunMS)))
	row("rates", fmt.Sprintf("%.0f responses/s, %.0f updates/s, %s/s", s.Rates.ResponsesPerSecond,
		s.Rates.UpdatesPerSecond, fmtBytes(int64(s.Rates.BytesPerSecond))))
	if s.Config.LoadReport {
		row("load reports sent", fmt.Sprintf("%d (%d LRS stream errors)", s.LoadReports, s.LRSErrors))
	}
	row("losses", s.Losses)
	for _, l := range s.LossExamples {
		row("  lost", fmt.Sprintf("%s: %s %s (%s)", l.Client, l.Type, l.Name, l.How))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("loadgen: write summary: %w", err)
	}
	return nil
}

// WriteJSON prints the summary as one indented JSON object.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("loadgen: write summary: %w", err)
	}
	return nil
}

// Progress is a live snapshot of a run.
type Progress struct {
	Clients   int
	Launched  int64
	Connected int64
	Synced    int64
	Updates   int64
	Errors    int64
	P50, P99  time.Duration
}

// String formats the one-line progress report.
func (p Progress) String() string {
	return fmt.Sprintf("connected %d/%d  synced %d/%d  updates %d  propagation p50 %s p99 %s  errors %d",
		p.Connected, p.Clients, p.Synced, p.Clients, p.Updates, fmtDuration(p.P50), fmtDuration(p.P99), p.Errors)
}
