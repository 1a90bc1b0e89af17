package keying

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// GroupKey projects node onto the group_by fields: "" without group_by.
func GroupKey(fields []string, node *corev3.Node) string {
	if len(fields) == 0 {
		return ""
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, f+"="+nodeField(node, f))
	}
	return strings.Join(parts, ",")
}

// nodeField reads one group_by field of node ("" when it has none).
func nodeField(node *corev3.Node, field string) string {
	v, _ := LookupNodeField(node, field)
	return v
}

// LookupNodeField reads a node field of keying (id, cluster,
// locality.region|zone|sub_zone, metadata.KEY) and reports whether the node
// has it: a non-empty string field, or a metadata key that is present.
// Metadata values that are not strings read as their JSON.
func LookupNodeField(node *corev3.Node, field string) (string, bool) {
	var v string
	switch field {
	case "id":
		v = node.GetId()
	case "cluster":
		v = node.GetCluster()
	case "locality.region":
		v = node.GetLocality().GetRegion()
	case "locality.zone":
		v = node.GetLocality().GetZone()
	case "locality.sub_zone":
		v = node.GetLocality().GetSubZone()
	default:
		key, ok := strings.CutPrefix(field, "metadata.")
		if !ok {
			return "", false
		}
		mv, ok := node.GetMetadata().GetFields()[key]
		if !ok {
			return "", false
		}
		if s, ok := mv.GetKind().(*structpb.Value_StringValue); ok {
			return s.StringValue, true
		}
		b, _ := mv.MarshalJSON()
		return string(b), true
	}
	return v, v != ""
}

// GroupNode is the node a group's upstream streams present: base (the
// relay's own), with the group's key in its id and the fields of client the
// group projects (fields, sorted) set.
func GroupNode(base *corev3.Node, fields []string, client *corev3.Node, key string) *corev3.Node {
	n := proto.Clone(base).(*corev3.Node)
	n.Id = base.GetId() + "/" + key
	md := map[string]any{}
	for k, v := range base.GetMetadata().GetFields() {
		md[k] = v.AsInterface()
	}
	for _, f := range fields {
		switch f {
		case "cluster":
			n.Cluster = client.GetCluster()
		case "locality.region", "locality.zone", "locality.sub_zone":
			if n.Locality == nil {
				n.Locality = &corev3.Locality{}
			}
			v := nodeField(client, f)
			switch f {
			case "locality.region":
				n.Locality.Region = v
			case "locality.zone":
				n.Locality.Zone = v
			default:
				n.Locality.SubZone = v
			}
		default:
			if key, ok := strings.CutPrefix(f, "metadata."); ok {
				if v, ok := client.GetMetadata().GetFields()[key]; ok {
					md[key] = v.AsInterface()
				}
			}
		}
	}
	if s, err := structpb.NewStruct(md); err == nil && len(md) > 0 {
		n.Metadata = s
	}
	return n
}
