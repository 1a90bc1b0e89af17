package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// NodeTemplate shapes the node every client presents, so that a run can
// exercise the relay's keying.group_by, dynamic_parameters_from_node and
// authorization by node. Each value is a template: {i} is the client's index,
// {i%N} the index modulo N, {id} its node id; anything else is literal.
type NodeTemplate struct {
	// Cluster is the node cluster; empty means the node prefix.
	Cluster string
	// Locality is "region/zone/sub_zone" (trailing parts may be left out);
	// empty means region-1/zone-a.
	Locality string
	// Metadata are string fields of the node's metadata.
	Metadata map[string]string
}

var placeholder = regexp.MustCompile(`\{([^{}]*)\}`)

// checkTemplate reports a placeholder expand does not know.
func checkTemplate(what, tmpl string) error {
	for _, m := range placeholder.FindAllStringSubmatch(tmpl, -1) {
		if _, err := expandOne(m[1], 0, ""); err != nil {
			return fmt.Errorf("loadgen: %s %q: %w", what, tmpl, err)
		}
	}
	return nil
}

// expand fills the placeholders of tmpl for client i with node id id.
func expand(tmpl string, i int, id string) string {
	return placeholder.ReplaceAllStringFunc(tmpl, func(m string) string {
		v, _ := expandOne(m[1:len(m)-1], i, id) // checked by checkTemplate
		return v
	})
}

func expandOne(p string, i int, id string) (string, error) {
	switch {
	case p == "i":
		return strconv.Itoa(i), nil
	case p == "id":
		return id, nil
	case strings.HasPrefix(p, "i%"):
		n, err := strconv.Atoi(p[2:])
		if err != nil || n < 1 {
			return "", fmt.Errorf("{%s}: want {i%%N} with N ≥ 1", p)
		}
		return strconv.Itoa(i % n), nil
	}
	return "", fmt.Errorf("unknown placeholder {%s} (want {i}, {i%%N} or {id})", p)
}

// check validates the templates.
func (t NodeTemplate) check() error {
	if err := checkTemplate("node cluster", t.Cluster); err != nil {
		return err
	}
	if err := checkTemplate("locality", t.Locality); err != nil {
		return err
	}
	if strings.Count(t.Locality, "/") > 2 {
		return fmt.Errorf("loadgen: locality %q: want region/zone/sub_zone", t.Locality)
	}
	for k, v := range t.Metadata {
		if err := checkTemplate("node metadata "+k, v); err != nil {
			return err
		}
	}
	return nil
}

// newNode returns the node client i presents.
func newNode(cfg Config, i int) *corev3.Node {
	id := cfg.NodePrefix + "-" + strconv.Itoa(i)
	t := cfg.Node
	n := &corev3.Node{Id: id, Cluster: cfg.NodePrefix, UserAgentName: "xds-loadgen",
		Locality: &corev3.Locality{Region: "region-1", Zone: "zone-a"}}
	if t.Cluster != "" {
		n.Cluster = expand(t.Cluster, i, id)
	}
	if t.Locality != "" {
		parts := strings.SplitN(expand(t.Locality, i, id), "/", 3)
		parts = append(parts, "", "")
		n.Locality = &corev3.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
	}
	if len(t.Metadata) > 0 {
		fields := make(map[string]*structpb.Value, len(t.Metadata))
		for k, v := range t.Metadata {
			fields[k] = structpb.NewStringValue(expand(v, i, id))
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	if cfg.Mode == ModeGRPC {
		n.UserAgentName = "gRPC Go (xds-loadgen)"
		n.ClientFeatures = []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}
	}
	return n
}
