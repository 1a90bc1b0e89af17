package tlsconfig_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

func TestLoadKeyPair(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "ca")
	srv := ca.Server(t)
	cert, key := srv.Write(t, dir, "server")
	_, otherKey := ca.Server(t).Write(t, dir, "other")
	garbage := xdstest.WriteFile(t, dir, "garbage.pem", []byte("garbage"))
	missing := filepath.Join(dir, "missing.pem")

	pair, err := tlsconfig.LoadKeyPair(cert, key)
	if err != nil {
		t.Fatalf("LoadKeyPair: %v", err)
	}
	if !pair.Leaf.Equal(srv.Leaf) {
		t.Errorf("Leaf = %v, want the server certificate", pair.Leaf.Subject)
	}

	tests := []struct {
		name       string
		cert, key  string
		role       tlsconfig.Role
		path       string
		isMismatch bool
		isNotExist bool
	}{
		{"missing cert", missing, key, tlsconfig.RoleCert, missing, false, true},
		{"garbage cert", garbage, key, tlsconfig.RoleCert, garbage, false, false},
		{"missing key", cert, missing, tlsconfig.RoleKey, missing, false, true},
		{"garbage key", cert, garbage, tlsconfig.RoleKey, garbage, false, false},
		{"other key", cert, otherKey, tlsconfig.RoleKey, otherKey, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tlsconfig.LoadKeyPair(tt.cert, tt.key)
			var fe *tlsconfig.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("LoadKeyPair = %v, want a *FileError", err)
			}
			if fe.Role != tt.role || fe.Path != tt.path {
				t.Errorf("FileError = %v %q, want %v %q", fe.Role, fe.Path, tt.role, tt.path)
			}
			if got := errors.Is(err, tlsconfig.ErrKeyMismatch); got != tt.isMismatch {
				t.Errorf("errors.Is(ErrKeyMismatch) = %v, want %v (%v)", got, tt.isMismatch, err)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.isNotExist {
				t.Errorf("errors.Is(fs.ErrNotExist) = %v, want %v (%v)", got, tt.isNotExist, err)
			}
		})
	}
}

func TestLoadPool(t *testing.T) {
	dir := t.TempDir()
	a, b := xdstest.NewCA(t, "a"), xdstest.NewCA(t, "b")
	bundle := xdstest.WriteFile(t, dir, "bundle.pem", append(append([]byte{}, a.CertPEM()...), b.CertPEM()...))
	pool, err := tlsconfig.LoadPool(bundle)
	if err != nil {
		t.Fatalf("LoadPool: %v", err)
	}
	if !pool.Equal(poolOf(a, b)) {
		t.Error("LoadPool of a bundle of two CAs: pool differs")
	}
	_, key := a.Server(t).Write(t, dir, "server")
	for _, path := range []string{key, filepath.Join(dir, "missing.pem")} {
		_, err := tlsconfig.LoadPool(path)
		var fe *tlsconfig.FileError
		if !errors.As(err, &fe) || fe.Role != tlsconfig.RoleCA || fe.Path != path {
			t.Errorf("LoadPool(%s) = %v, want a RoleCA *FileError", path, err)
		}
	}
}

func TestServerCredentialsErrors(t *testing.T) {
	dir := t.TempDir()
	ca := xdstest.NewCA(t, "ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	if _, _, err := tlsconfig.ServerCredentials(tlsconfig.Files{CertFile: cert}, 0); err == nil {
		t.Error("ServerCredentials with a certificate and no key: nil error")
	}
	if _, _, err := tlsconfig.ServerCredentials(tlsconfig.Files{}, 0); err == nil {
		t.Error("ServerCredentials without files: nil error")
	}
	_, _, err := tlsconfig.ServerCredentials(tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: filepath.Join(dir, "missing.pem")}, 0)
	var fe *tlsconfig.FileError
	if !errors.As(err, &fe) || fe.Role != tlsconfig.RoleCA {
		t.Errorf("ServerCredentials with a missing CA file = %v, want a RoleCA *FileError", err)
	}
}
