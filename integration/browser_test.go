package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/relay"
)

// chromiumPath is Debian's chromium launcher (.ci/install-chromium.sh).
const chromiumPath = "/usr/bin/chromium"

// TestStatusPageInBrowser serves the admin handler of a relay with three
// clients (two SotW ADS streams, one of which NACKs, and a Delta stream),
// loads the status page in headless Chromium and checks that the DOM the
// browser built carries the relay's figures.
func TestStatusPageInBrowser(t *testing.T) {
	requireChromium(t)

	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	r := xdstest.StartRelayLogged(t, zaptest.NewLogger(t), up.Addr())
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	n := xdstest.NamesFor("svc")

	envoy := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy-1"})
	envoy.Subscribe(resource.ListenerType, n.Listener)
	envoy.Ack(envoy.RecvType(resource.ListenerType))

	const reason = "browser-test: cluster <rejected> & kept"
	nacker := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "envoy-2"})
	nacker.Subscribe(resource.ClusterType, n.Cluster)
	nacker.Nack(nacker.RecvType(resource.ClusterType), reason)

	delta := xdstest.DialDelta(t, r.Addr(), &core.Node{Id: "grpc-1"})
	delta.Subscribe(resource.ClusterType, []string{n.Cluster}, nil)
	delta.Ack(delta.MustRecv())

	o := waitFleet(t, r)
	dom := dumpDOM(t, srv.URL+"/")

	checks := []struct{ what, want string }{
		{"title", "<title>xds-relay status</title>"},
		{"readiness", `data-state="ready" id="ready" class="ok">ready<`},
		{"streams", `id="fleet-streams">3<`},
		{"nodes", `id="fleet-nodes">3<`},
		{"SotW streams", `id="fleet-sotw">2<`},
		{"Delta streams", `id="fleet-delta">1<`},
		{"NACK message (escaped)", "browser-test: cluster &lt;rejected&gt; &amp; kept"},
		{"NACK group's node", `<span class="node">envoy-2</span>`},
		{"NACK group's streams", `<td class="n streams">1</td>`},
		{"NACK groups", `id="nack-groups">1<`},
		{"current NACKs", `id="nacks-current">1<`},
		{"propagation count", fmt.Sprintf(`id="prop-count">%d<`, o.Propagation.Count)},
	}
	for _, c := range checks {
		if !strings.Contains(dom, c.want) {
			t.Errorf("DOM: %s: no %q", c.what, c.want)
		}
	}
	if o.Propagation.Count == 0 || strings.Contains(dom, `id="prop-p50">0<`) {
		t.Errorf("DOM: propagation p50 is 0 after %d ACKed updates", o.Propagation.Count)
	}

	// The upstream's row says it is the current server and connected.
	upRow := row(t, dom, "upstream", fmt.Sprintf(`data-server="%s"`, up.Addr()))
	for _, want := range []string{`class="state ok">connected<`, `class="connected ok">yes<`, "(current)",
		`class="n subscribed">2<`} {
		if !strings.Contains(upRow, want) {
			t.Errorf("DOM: upstream row lacks %q: %s", want, upRow)
		}
	}

	// One row per cached type, with the resource count and the bytes the
	// relay reports in /debug/cache.
	for _, typ := range []string{resource.ListenerType, resource.ClusterType} {
		entries := r.DebugCache(relay.CacheFilter{Type: typ})
		if len(entries) != 1 {
			t.Fatalf("DebugCache(%s) = %+v, want one entry", typ, entries)
		}
		cacheRow := row(t, dom, "cache-type", fmt.Sprintf(`data-type="%s"`, typ))
		for _, want := range []string{`class="n resources">1<`, `class="n watched">1<`,
			fmt.Sprintf(`data-bytes="%d"`, entries[0].Bytes)} {
			if !strings.Contains(cacheRow, want) {
				t.Errorf("DOM: cache row of %s lacks %q: %s", typ, want, cacheRow)
			}
		}
	}

	// The histogram has a row per bucket plus the overflow; the bucket
	// counts add up to the total.
	buckets := regexp.MustCompile(`<tr class="bucket"[^>]*>.*?class="n count">(\d+)<`).FindAllStringSubmatch(dom, -1)
	if len(buckets) != len(o.Propagation.Buckets)+1 {
		t.Errorf("DOM: %d histogram rows, want %d", len(buckets), len(o.Propagation.Buckets)+1)
	}
	var sum uint64
	for _, b := range buckets {
		var c uint64
		_, _ = fmt.Sscan(b[1], &c)
		sum += c
	}
	if sum != o.Propagation.Count {
		t.Errorf("DOM: histogram rows sum to %d, want %d", sum, o.Propagation.Count)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// waitFleet waits (10 s) until the relay's overview shows the three
// streams, the NACK and an ACKed update, and returns it.
func waitFleet(t *testing.T, r *xdstest.Relay) admin.Overview {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		o := admin.OverviewOf(r.Relay)
		if o.Fleet.Streams == 3 && o.NACKsTotal == 1 && o.Propagation.Count >= 1 &&
			len(o.Upstreams) == 1 && o.Upstreams[0].Connected {
			return o
		}
		select {
		case <-ctx.Done():
			t.Fatalf("relay overview not settled within 10s: %+v", o)
		case <-tick.C:
		}
	}
}

// row returns the first <tr class="class" ...> element of dom whose start
// tag contains attr.
func row(t *testing.T, dom, class, attr string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr class="` + regexp.QuoteMeta(class) + `"[^>]*` + regexp.QuoteMeta(attr) + `[^>]*>.*?</tr>`)
	m := re.FindString(dom)
	if m == "" {
		t.Errorf("DOM: no %s row with %s", class, attr)
	}
	return m
}

// requireChromium fails the test, naming the install script, when Chromium
// is missing (`make test` installs it first). Only -short skips it.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := "chromium is not installed (" + chromiumPath + " missing): run .ci/install-chromium.sh, or make test"
		if testing.Short() {
			t.Skip(msg + " (skipped: -short)")
		}
		t.Fatal(msg)
	}
}

// dumpDOM loads url in headless Chromium (a fresh profile, no network
// besides url) and returns the DOM after the page loaded. Chromium runs in a
// process group of its own, killed when it exits so that no helper process
// outlives the test.
func dumpDOM(t *testing.T, url string) string {
	t.Helper()
	profile, err := os.MkdirTemp("", "xds-relay-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(profile) }()

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-proxy-server", "--user-data-dir="+profile, "--dump-dom", url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if cmd.Process != nil {
		// Reap helpers (crashpad, zygote) left in the group.
		if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			t.Logf("chromium: kill process group: %v", kerr)
		}
	}
	if err != nil || stdout.Len() == 0 {
		t.Fatalf("chromium --dump-dom %s: %v (ctx: %v)\nstdout:\n%s\nstderr:\n%s", url, err, ctx.Err(),
			stdout.String(), lastLines(stderr.String(), 40))
	}
	return stdout.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
