package csds

import (
	"fmt"
	"regexp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// nodeMatcher is a compiled envoy.type.matcher.v3.NodeMatcher: a node
// matches when its id matches node_id (if set) and every node_metadatas
// entry matches its metadata.
type nodeMatcher struct {
	id       *stringMatcher
	metadata []structMatcher
}

// maxRegex bounds a safe_regex pattern (RE2: linear time, but the program
// size grows with the pattern).
const maxRegex = 1 << 10

// maxDepth bounds the nesting of list_match and or_match.
const maxDepth = 16

// compileNodeMatchers compiles a request's node_matchers. A matcher this
// relay cannot evaluate (custom string matchers) is an error, not a silent
// match.
func compileNodeMatchers(ms []*matcherv3.NodeMatcher) ([]nodeMatcher, error) {
	out := make([]nodeMatcher, 0, len(ms))
	for i, m := range ms {
		nm := nodeMatcher{}
		if m.GetNodeId() != nil {
			s, err := compileString(m.GetNodeId())
			if err != nil {
				return nil, fmt.Errorf("node_matchers[%d].node_id: %w", i, err)
			}
			nm.id = s
		}
		for j, sm := range m.GetNodeMetadatas() {
			c, err := compileStruct(sm)
			if err != nil {
				return nil, fmt.Errorf("node_matchers[%d].node_metadatas[%d]: %w", i, j, err)
			}
			nm.metadata = append(nm.metadata, c)
		}
		out = append(out, nm)
	}
	return out, nil
}

// matchAny reports whether node matches one of ms (every node when ms is
// empty, as CSDS asks).
func matchAny(ms []nodeMatcher, node *corev3.Node) bool {
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if m.match(node) {
			return true
		}
	}
	return false
}

func (m nodeMatcher) match(node *corev3.Node) bool {
	if m.id != nil && !m.id.match(node.GetId()) {
		return false
	}
	for _, sm := range m.metadata {
		if !sm.match(node.GetMetadata()) {
			return false
		}
	}
	return true
}

// stringMatcher is a compiled StringMatcher.
type stringMatcher struct {
	kind       string // exact, prefix, suffix, contains, regex
	pattern    string
	re         *regexp.Regexp
	ignoreCase bool
}

func compileString(m *matcherv3.StringMatcher) (*stringMatcher, error) {
	s := &stringMatcher{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		s.kind, s.pattern = "exact", p.Exact
	case *matcherv3.StringMatcher_Prefix:
		s.kind, s.pattern = "prefix", p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		s.kind, s.pattern = "suffix", p.Suffix
	case *matcherv3.StringMatcher_Contains:
		s.kind, s.pattern = "contains", p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		re := p.SafeRegex.GetRegex()
		if len(re) > maxRegex {
			return nil, fmt.Errorf("safe_regex of %d bytes, the limit is %d", len(re), maxRegex)
		}
		// Envoy matches a safe_regex against the whole string (RE2, as Go's).
		c, err := regexp.Compile(`^(?:` + re + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		s.kind, s.re = "regex", c
		return s, nil
	case nil:
		return nil, fmt.Errorf("no match pattern")
	default:
		return nil, fmt.Errorf("match pattern %T is not supported", p)
	}
	if s.ignoreCase {
		s.pattern = strings.ToLower(s.pattern)
	}
	return s, nil
}

func (s *stringMatcher) match(v string) bool {
	if s.re != nil {
		return s.re.MatchString(v)
	}
	if s.ignoreCase {
		v = strings.ToLower(v)
	}
	switch s.kind {
	case "exact":
		return v == s.pattern
	case "prefix":
		return strings.HasPrefix(v, s.pattern)
	case "suffix":
		return strings.HasSuffix(v, s.pattern)
	default:
		return strings.Contains(v, s.pattern)
	}
}

// structMatcher is a compiled StructMatcher over node metadata.
type structMatcher struct {
	path  []string
	value *valueMatcher
}

func compileStruct(m *matcherv3.StructMatcher) (structMatcher, error) {
	if len(m.GetPath()) == 0 {
		return structMatcher{}, fmt.Errorf("path: at least one segment is required")
	}
	sm := structMatcher{}
	for i, seg := range m.GetPath() {
		k, ok := seg.GetSegment().(*matcherv3.StructMatcher_PathSegment_Key)
		if !ok || k.Key == "" {
			return structMatcher{}, fmt.Errorf("path[%d]: a segment must be a non-empty key", i)
		}
		sm.path = append(sm.path, k.Key)
	}
	if m.GetValue() == nil {
		return structMatcher{}, fmt.Errorf("value: required")
	}
	v, err := compileValue(m.GetValue(), 0)
	if err != nil {
		return structMatcher{}, fmt.Errorf("value: %w", err)
	}
	sm.value = v
	return sm, nil
}

// match looks the path up in md (a missing path is a value of no kind, as in
// Envoy's metadata matcher) and matches the value there.
func (m structMatcher) match(md *structpb.Struct) bool {
	var v *structpb.Value
	fields := md.GetFields()
	for i, k := range m.path {
		v = fields[k]
		if v == nil {
			break
		}
		if i < len(m.path)-1 {
			fields = v.GetStructValue().GetFields()
			if fields == nil {
				v = nil
				break
			}
		}
	}
	return m.value.match(v)
}

// valueMatcher is a compiled ValueMatcher.
type valueMatcher struct {
	kind     string // null, double, string, bool, present, list, or
	lo, hi   float64
	exact    *float64
	str      *stringMatcher
	boolean  bool
	children []*valueMatcher // list (one element), or
}

func compileValue(m *matcherv3.ValueMatcher, depth int) (*valueMatcher, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested more than %d deep", maxDepth)
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.ValueMatcher_NullMatch_:
		return &valueMatcher{kind: "null"}, nil
	case *matcherv3.ValueMatcher_DoubleMatch:
		vm := &valueMatcher{kind: "double"}
		switch d := p.DoubleMatch.GetMatchPattern().(type) {
		case *matcherv3.DoubleMatcher_Exact:
			e := d.Exact
			vm.exact = &e
		case *matcherv3.DoubleMatcher_Range:
			vm.lo, vm.hi = d.Range.GetStart(), d.Range.GetEnd()
		default:
			return nil, fmt.Errorf("double_match: no match pattern")
		}
		return vm, nil
	case *matcherv3.ValueMatcher_StringMatch:
		s, err := compileString(p.StringMatch)
		if err != nil {
			return nil, fmt.Errorf("string_match: %w", err)
		}
		return &valueMatcher{kind: "string", str: s}, nil
	case *matcherv3.ValueMatcher_BoolMatch:
		return &valueMatcher{kind: "bool", boolean: p.BoolMatch}, nil
	case *matcherv3.ValueMatcher_PresentMatch:
		return &valueMatcher{kind: "present", boolean: p.PresentMatch}, nil
	case *matcherv3.ValueMatcher_ListMatch:
		c, err := compileValue(p.ListMatch.GetOneOf(), depth+1)
		if err != nil {
			return nil, fmt.Errorf("list_match.one_of: %w", err)
		}
		return &valueMatcher{kind: "list", children: []*valueMatcher{c}}, nil
	case *matcherv3.ValueMatcher_OrMatch:
		vm := &valueMatcher{kind: "or"}
		for i, c := range p.OrMatch.GetValueMatchers() {
			cm, err := compileValue(c, depth+1)
			if err != nil {
				return nil, fmt.Errorf("or_match.value_matchers[%d]: %w", i, err)
			}
			vm.children = append(vm.children, cm)
		}
		if len(vm.children) < 2 {
			return nil, fmt.Errorf("or_match: at least two value_matchers are required")
		}
		return vm, nil
	default:
		return nil, fmt.Errorf("no match pattern")
	}
}

// match follows Envoy's ValueMatcher: v nil is a value of no kind.
func (m *valueMatcher) match(v *structpb.Value) bool {
	switch m.kind {
	case "null":
		_, ok := v.GetKind().(*structpb.Value_NullValue)
		return ok
	case "double":
		n, ok := v.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return false
		}
		if m.exact != nil {
			return n.NumberValue == *m.exact
		}
		return n.NumberValue >= m.lo && n.NumberValue < m.hi
	case "string":
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		return ok && m.str.match(s.StringValue)
	case "bool":
		b, ok := v.GetKind().(*structpb.Value_BoolValue)
		return ok && b.BoolValue == m.boolean
	case "present":
		// Envoy: present_match true matches any value; false matches nothing.
		return m.boolean && v.GetKind() != nil
	case "list":
		for _, e := range v.GetListValue().GetValues() {
			if m.children[0].match(e) {
				return true
			}
		}
		return false
	default: // or
		for _, c := range m.children {
			if c.match(v) {
				return true
			}
		}
		return false
	}
}
