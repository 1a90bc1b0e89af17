package downstream

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xds-relay/xds-relay/keying"
)

// ResourceError is a TP3 per-resource error: the relay's own (an authority
// that is not configured) or one the upstream sent. Immutable once published.
type ResourceError struct {
	Name    string
	Code    codes.Code
	Message string

	once sync.Once
	enc  []byte // envoy.service.discovery.v3.ResourceError, encoded on first use
}

// NotFound reports whether the error is a data error meaning "does not
// exist" (TP3: the same as a Delta removal).
func (e *ResourceError) NotFound() bool { return e.Code == codes.NotFound }

// dataError reports a TP3 data error (NOT_FOUND, PERMISSION_DENIED): the
// resource is gone for the client. The others are transient: the client
// keeps what it has.
func (e *ResourceError) dataError() bool {
	return e.Code == codes.NotFound || e.Code == codes.PermissionDenied
}

// bytes returns the encoded ResourceError{resource_name: {name},
// error_detail: google.rpc.Status{code, message}}.
func (e *ResourceError) bytes() []byte {
	e.once.Do(func() {
		var name []byte
		n, _ := keying.SplitSubscriptionKey(e.Name) // the name, without a subscription's parameters
		name = protowire.AppendTag(name, 1, protowire.BytesType)
		name = protowire.AppendString(name, n)
		var st []byte
		st = protowire.AppendTag(st, 1, protowire.VarintType)
		st = protowire.AppendVarint(st, uint64(e.Code))
		st = protowire.AppendTag(st, 2, protowire.BytesType)
		st = protowire.AppendString(st, e.Message)
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, name)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
		e.enc = b
	})
	return e.enc
}

// Field numbers of resource_errors in the responses.
const (
	sotwResourceErrors  = 7
	deltaResourceErrors = 9
)

// appendErrors appends errs as repeated field num.
func appendErrors(b []byte, num protowire.Number, errs []*ResourceError) []byte {
	for _, e := range errs {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, e.bytes())
	}
	return b
}
