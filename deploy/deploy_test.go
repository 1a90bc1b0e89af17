package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// read returns the file at path (relative to deploy/), failing the test
// when it cannot be read.
func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// glob returns the files matching pattern, sorted, and fails the test when
// there are none.
func glob(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("glob %s: %v (%d files)", pattern, err, len(files))
	}
	slices.Sort(files)
	return files
}

// TestDockerfile checks the image recipe: a Go build stage on the go.mod
// toolchain line, a static binary of cmd/xds-relay, the distroless nonroot
// base and user, both bases pinned by digest, the OCI labels, and a config
// path where the Deployment mounts it.
func TestDockerfile(t *testing.T) {
	df := string(read(t, "Dockerfile"))

	gomod := string(read(t, "../go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	var froms []string
	sc := bufio.NewScanner(strings.NewReader(df))
	var instr []string // instructions, continuation lines joined
	var cur strings.Builder
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
		if !strings.HasSuffix(line, "\\") {
			instr = append(instr, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	for _, in := range instr {
		if strings.HasPrefix(in, "FROM ") {
			froms = append(froms, in)
		}
	}
	last := func(prefix string) string {
		for i := len(instr) - 1; i >= 0; i-- {
			if strings.HasPrefix(instr[i], prefix) {
				return instr[i]
			}
		}
		return ""
	}
	wantFroms := []*regexp.Regexp{
		regexp.MustCompile(`^FROM --platform=\$BUILDPLATFORM golang:` + regexp.QuoteMeta(m[1]) + `-bookworm@sha256:[0-9a-f]{64} AS build$`),
		regexp.MustCompile(`^FROM gcr\.io/distroless/static-debian12:nonroot@sha256:[0-9a-f]{64}$`),
	}
	if len(froms) != len(wantFroms) {
		t.Errorf("stages = %q, want a build stage and a distroless one", froms)
	}
	for i, re := range wantFroms {
		if i < len(froms) && !re.MatchString(froms[i]) {
			t.Errorf("stage %d = %q, want %s (pinned by digest)", i, froms[i], re)
		}
	}
	labels := last("LABEL ")
	for _, key := range []string{"title", "description", "source", "version", "revision", "created", "documentation"} {
		if !strings.Contains(labels, "org.opencontainers.image."+key+"=") {
			t.Errorf("LABEL lacks org.opencontainers.image.%s", key)
		}
	}
	if got := last("USER "); got != "USER nonroot:nonroot" {
		t.Errorf("final USER = %q, want nonroot", got)
	}
	build := last("RUN ")
	// The flags of scripts/release.sh, so that the image's binary is the
	// release's; GOARCH from the platform buildx builds for.
	for _, want := range []string{"CGO_ENABLED=0", "GOARCH=${TARGETARCH}", "go build", "-trimpath", "-buildvcs=false",
		"-buildid=", "./cmd/xds-relay", "-X main.version="} {
		if !strings.Contains(build, want) {
			t.Errorf("build step %q lacks %q", build, want)
		}
	}
	// The image's binary is built as scripts/release.sh builds dist/'s, and
	// make release builds the image from this Dockerfile.
	release := string(read(t, "../scripts/release.sh"))
	for _, flag := range []string{"CGO_ENABLED=0", "GOAMD64=v1", "GOARM64=v8.0", "-trimpath", "-buildvcs=false", "-s -w -buildid="} {
		if !strings.Contains(release, flag) || !strings.Contains(build, flag) {
			t.Errorf("scripts/release.sh and the Dockerfile's build step do not both build with %q", flag)
		}
	}
	if !strings.Contains(release, "-f deploy/Dockerfile") {
		t.Error("scripts/release.sh does not build the image from deploy/Dockerfile")
	}
	if _, err := os.Stat("../cmd/xds-relay/main.go"); err != nil {
		t.Errorf("the Dockerfile builds ./cmd/xds-relay: %v", err)
	}
	if got := last("EXPOSE "); got != "EXPOSE 18001 9903" {
		t.Errorf("EXPOSE = %q", got)
	}
	if got := last("ENTRYPOINT "); got != `ENTRYPOINT ["/usr/local/bin/xds-relay"]` {
		t.Errorf("ENTRYPOINT = %q", got)
	}
	if got := last("CMD "); got != `CMD ["--config", "`+configPath+`"]` {
		t.Errorf("CMD = %q, want --config %s", got, configPath)
	}
	ignore := read(t, "Dockerfile.dockerignore")
	for _, want := range []string{".git", "**/node_modules"} {
		if !bytes.Contains(ignore, []byte(want+"\n")) {
			t.Errorf("Dockerfile.dockerignore lacks %q", want)
		}
	}
}
