package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// Keys of a tls channel_creds config (gRPC's tls_creds, gRFC A65) and of a
// jwt_token_file call_creds config (gRFC A97).
const (
	keyCAFile          = "ca_certificate_file"
	keyCertFile        = "certificate_file"
	keyKeyFile         = "private_key_file"
	keySPIFFEBundleMap = "spiffe_trust_bundle_map_file"
	keyRefreshInterval = "refresh_interval"
	keyJWTTokenFile    = "jwt_token_file"
)

// str reads a string value of a creds config; absent or null is "".
func str(cfg map[string]any, key string) (string, error) {
	v, ok := cfg[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", &FieldError{Field: "config." + key, Msg: "must be a string"}
	}
	return s, nil
}

// TLS decodes the Config of a channel_creds entry of type tls. It checks the
// keys and value types, not the files (Validate does). An error is a
// *FieldError whose Field is relative to the entry, e.g.
// "config.certificate_file".
func (cc ChannelCreds) TLS() (TLSChannelCreds, error) {
	var t TLSChannelCreds
	for _, k := range slices.Sorted(maps.Keys(cc.Config)) {
		switch k {
		case keyCAFile, keyCertFile, keyKeyFile, keySPIFFEBundleMap, keyRefreshInterval:
		default:
			return t, &FieldError{Field: join("config", k), Msg: fmt.Sprintf(
				"unknown field (want %s, %s, %s, %s or %s)", keyCAFile, keyCertFile, keyKeyFile, keySPIFFEBundleMap, keyRefreshInterval)}
		}
	}
	for key, dst := range map[string]*string{
		keyCAFile: &t.CACertificateFile, keyCertFile: &t.CertificateFile, keyKeyFile: &t.PrivateKeyFile,
		keySPIFFEBundleMap: &t.SPIFFETrustBundleMapFile,
	} {
		s, err := str(cc.Config, key)
		if err != nil {
			return t, err
		}
		*dst = s
	}
	ri, err := str(cc.Config, keyRefreshInterval)
	if err != nil {
		return t, err
	}
	if ri != "" {
		d, err := time.ParseDuration(ri)
		if err != nil || d <= 0 {
			return t, &FieldError{Field: "config." + keyRefreshInterval, Msg: `must be a positive duration like "10m"`}
		}
		t.RefreshInterval = d
	}
	switch {
	case t.CertificateFile == "" && t.PrivateKeyFile != "":
		return t, &FieldError{Field: "config." + keyCertFile, Msg: "required with " + keyKeyFile}
	case t.CertificateFile != "" && t.PrivateKeyFile == "":
		return t, &FieldError{Field: "config." + keyKeyFile, Msg: "required with " + keyCertFile}
	}
	return t, nil
}

// JWTTokenFile returns the token file of call_creds of type jwt_token_file,
// checking that it can be read. An error is a *FieldError whose Field is
// relative to the entry.
func (cc CallCreds) JWTTokenFile() (string, error) {
	for _, k := range slices.Sorted(maps.Keys(cc.Config)) {
		if k != keyJWTTokenFile {
			return "", &FieldError{Field: join("config", k), Msg: "unknown field (want " + keyJWTTokenFile + ")"}
		}
	}
	f, err := str(cc.Config, keyJWTTokenFile)
	switch {
	case err != nil:
		return "", err
	case f == "":
		return "", &FieldError{Field: "config." + keyJWTTokenFile, Msg: "required for type " + CallCredsJWTTokenFile}
	}
	if _, err := os.ReadFile(f); err != nil {
		return "", &FieldError{Field: "config." + keyJWTTokenFile, Msg: err.Error()}
	}
	return f, nil
}

// checkTLSCreds validates a tls channel_creds entry; path names the entry.
func checkTLSCreds(path string, cc ChannelCreds) error {
	t, err := cc.TLS()
	if err != nil {
		return prefixed(path, err)
	}
	if f := t.SPIFFETrustBundleMapFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return &FieldError{Field: path + ".config." + keySPIFFEBundleMap, Msg: err.Error()}
		}
	}
	return checkFiles(tlsconfig.Files{CertFile: t.CertificateFile, KeyFile: t.PrivateKeyFile, CAFile: t.CACertificateFile},
		path+".config."+keyCertFile, path+".config."+keyKeyFile, path+".config."+keyCAFile)
}

// tls validates the downstream tls section.
func (v *validation) tls(t *TLS) {
	switch {
	case t.CertFile == "":
		v.add("tls.cert_file", "required")
	case t.KeyFile == "":
		v.add("tls.key_file", "required")
	default:
		if err := checkFiles(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile},
			"tls.cert_file", "tls.key_file", "tls.client_ca_file"); err != nil {
			v.addErr("tls", err)
		}
	}
	v.nonNegative("tls.refresh_interval", t.RefreshInterval < 0, " (0: the default, 10m)")
}

// checkFiles loads the files of f (those that are set) and reports a bad one
// by the field that names it.
func checkFiles(f tlsconfig.Files, certField, keyField, caField string) error {
	var err error
	if f.CertFile != "" {
		_, err = tlsconfig.LoadKeyPair(f.CertFile, f.KeyFile)
	}
	if err == nil && f.CAFile != "" {
		_, err = tlsconfig.LoadPool(f.CAFile)
	}
	var fe *tlsconfig.FileError
	if !errors.As(err, &fe) {
		return err // nil
	}
	field := map[tlsconfig.Role]string{tlsconfig.RoleCert: certField, tlsconfig.RoleKey: keyField, tlsconfig.RoleCA: caField}[fe.Role]
	msg := fe.Err.Error()
	if errors.Is(fe.Err, tlsconfig.ErrKeyMismatch) {
		msg = "private key does not match the certificate of " + certField
	}
	return &FieldError{Field: field, Msg: msg}
}
