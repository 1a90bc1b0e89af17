package downstream

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// encoded is a response whose body was encoded once for many streams; only
// the nonce field is this stream's own. The codec sends the shared body bytes
// without copying them.
type encoded struct {
	body  []byte
	nonce []byte // the encoded nonce field
}

func newEncoded(b []byte, nonceField int, nonce string) *encoded {
	f := make([]byte, 0, 2+len(nonce))
	f = protowire.AppendTag(f, protowire.Number(nonceField), protowire.BytesType)
	f = protowire.AppendString(f, nonce)
	return &encoded{body: b, nonce: f}
}

func (e *encoded) size() int { return len(e.body) + len(e.nonce) }

// codec sends *encoded messages as their bytes, decodes SotW requests with
// their stream's names memo, and everything else through grpc's proto codec.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.body), mem.SliceBuffer(e.nonce)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*sotwRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.unmarshal(buf.ReadOnlyData())
}

func (c codec) Name() string { return proto.Name }

// ServerOptions returns the grpc.Server options the downstream server needs:
// its codec (pre-encoded responses) and lean per-connection buffers.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2(proto.Name)}),
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(4 << 10), // xDS requests are small; 4 KiB per connection, not 32
		grpc.WriteBufferSize(16 << 10),
		// An xDS stream sends one HEADERS frame in its life: clients need no
		// HPACK dynamic table for it, and the relay keeps none per connection.
		grpc.HeaderTableSize(0),
	}
}
