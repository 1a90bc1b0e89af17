package admin

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A type not linked into the relay is dumped as its type and base64 bytes.
func TestUnknownTypeAsBase64(t *testing.T) {
	b, _ := proto.Marshal(&anypb.Any{TypeUrl: "type.googleapis.com/example.v1.Unknown", Value: []byte{1, 2, 3}})
	var got map[string]string
	if err := json.Unmarshal(resourceJSON(b), &got); err != nil {
		t.Fatal(err)
	}
	if got["@type"] != "type.googleapis.com/example.v1.Unknown" || got["value"] != "AQID" {
		t.Errorf("unknown type dumped as %v", got)
	}
}
