package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xds-relay/xds-relay/internal/tlsconfig"
)

// Keys of a tls channel_creds config (gRPC's tls_creds).
const (
	keyCAFile          = "ca_certificate_file"
	keyCertFile        = "certificate_file"
	keyKeyFile         = "private_key_file"
	keyRefreshInterval = "refresh_interval" // gRPC's; accepted and ignored
)

// TLS decodes the Config of a channel_creds entry of type tls. It checks the
// keys and value types, not the files (Validate does). An error is a
// *FieldError whose Field is relative to the entry, e.g.
// "config.ca_certificate_file".
func (cc ChannelCreds) TLS() (TLSChannelCreds, error) {
	var t TLSChannelCreds
	str := func(key string) (string, error) {
		v, ok := cc.Config[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", &FieldError{Field: "config." + key, Msg: "must be a string"}
		}
		return s, nil
	}
	for _, k := range slices.Sorted(maps.Keys(cc.Config)) {
		switch k {
		case keyCAFile, keyCertFile, keyKeyFile, keyRefreshInterval:
		default:
			return t, &FieldError{Field: join("config", k), Msg: fmt.Sprintf(
				"unknown field (want %s, %s, %s)", keyCAFile, keyCertFile, keyKeyFile)}
		}
	}
	var err error
	if t.CACertificateFile, err = str(keyCAFile); err != nil {
		return t, err
	}
	if t.CertificateFile, err = str(keyCertFile); err != nil {
		return t, err
	}
	if t.PrivateKeyFile, err = str(keyKeyFile); err != nil {
		return t, err
	}
	ri, err := str(keyRefreshInterval)
	if err != nil {
		return t, err
	}
	if ri != "" {
		if _, err := time.ParseDuration(ri); err != nil {
			return t, &FieldError{Field: "config." + keyRefreshInterval, Msg: `must be a duration like "10m"`}
		}
	}
	switch {
	case t.CACertificateFile == "":
		return t, &FieldError{Field: "config." + keyCAFile, Msg: "required for type tls"}
	case t.CertificateFile == "" && t.PrivateKeyFile != "":
		return t, &FieldError{Field: "config." + keyCertFile, Msg: "required with " + keyKeyFile}
	case t.CertificateFile != "" && t.PrivateKeyFile == "":
		return t, &FieldError{Field: "config." + keyKeyFile, Msg: "required with " + keyCertFile}
	}
	return t, nil
}

// checkTLSCreds validates a tls channel_creds entry; path names the entry.
func checkTLSCreds(path string, cc ChannelCreds) error {
	t, err := cc.TLS()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return &FieldError{Field: path + "." + fe.Field, Msg: fe.Msg}
		}
		return err
	}
	return checkFiles(tlsconfig.Files{CertFile: t.CertificateFile, KeyFile: t.PrivateKeyFile, CAFile: t.CACertificateFile},
		path+".config."+keyCertFile, path+".config."+keyKeyFile, path+".config."+keyCAFile)
}

// checkTLS validates the downstream tls section.
func checkTLS(t *TLS) error {
	switch {
	case t.CertFile == "":
		return &FieldError{Field: "tls.cert_file", Msg: "required"}
	case t.KeyFile == "":
		return &FieldError{Field: "tls.key_file", Msg: "required"}
	}
	return checkFiles(tlsconfig.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile},
		"tls.cert_file", "tls.key_file", "tls.client_ca_file")
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
