package config

import (
	"errors"
	"strings"
)

// Locations says where the fields of a parsed config file are (ParseAll), so
// that the problems Validate finds name the line of the field they are about.
type Locations struct {
	// lines holds the line of every field path written in the file, in the
	// form FieldError.Field takes ("upstream.xds_servers[0].server_uri").
	lines map[string]int
	// reported holds the paths of the file's unknown keys and bad values.
	reported []string
}

// Line returns the line of field in the file, or of its nearest enclosing
// section that the file has ("upstream" for an absent "upstream.xds_servers"),
// and 0 when neither is in the file.
func (l *Locations) Line(field string) int {
	if l == nil {
		return 0
	}
	for p := field; p != ""; p = parent(p) {
		if n, ok := l.lines[p]; ok {
			return n
		}
	}
	return 0
}

// Forget removes field and everything under it: its value no longer comes
// from the file (a flag set it), so its problems name no line of the file.
func (l *Locations) Forget(field string) {
	if l == nil {
		return
	}
	for p := range l.lines {
		if p == field || isUnder(p, field) {
			delete(l.lines, p)
		}
	}
}

// Report joins the error of ParseAll (or LoadAll) and the error of Validate
// into one, every problem once, the file's first: Validate's errors about a
// field the file's errors already name, or a field under it, are left out
// (that field was left at its default), and the others get the line of their
// field when the file has it. Either error may be nil; so is the result when
// both are.
func (l *Locations) Report(parseErr, validateErr error) error {
	errs := unjoin(parseErr)
	for _, err := range unjoin(validateErr) {
		var fe *FieldError
		if !errors.As(err, &fe) {
			errs = append(errs, err)
			continue
		}
		if l.covers(fe.Field) {
			continue
		}
		if fe.Line == 0 {
			located := *fe
			located.Line = l.Line(fe.Field)
			err = &located
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// covers reports whether the file's errors name field or a section holding it.
func (l *Locations) covers(field string) bool {
	if l == nil {
		return false
	}
	for _, p := range l.reported {
		if p == field || isUnder(field, p) {
			return true
		}
	}
	return false
}

// unjoin returns the errors joined in err (errors.Join), err alone, or none.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// isUnder reports whether field is inside section: "a.b" and "a[0]" are in "a".
func isUnder(field, section string) bool {
	rest, ok := strings.CutPrefix(field, section)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '[')
}

// parent returns the path of the section holding field, "" at the top.
func parent(field string) string {
	i := strings.LastIndex(field, ".")
	if strings.HasSuffix(field, "]") {
		i = strings.LastIndex(field, "[")
	}
	if i < 0 {
		return ""
	}
	return field[:i]
}
