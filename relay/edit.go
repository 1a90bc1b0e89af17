package relay

import (
	"maps"

	"github.com/xds-relay/xds-relay/downstream"
)

// viewEdit is a copy-on-write change of one type's View. It starts from the
// current View's maps and copies each at its first change, so a published
// View is never modified; view returns the next View. Every change of a View
// goes through one. Used with mu held.
type viewEdit struct {
	old     *downstream.View
	res     map[string]*downstream.Resource
	absent  map[string]struct{}
	unfound map[string]struct{}
	errs    map[string]*downstream.ResourceError
	changed map[string]struct{}
	globs   map[string]struct{} // the glob collections whose set the upstream answered

	// withdrawn holds the versions of unfound names' copies taken for gone
	// (View.Withdrawn).
	withdrawn map[string]string

	resCopied, absentCopied, unfoundCopied, withdrawnCopied, errsCopied, globsCopied bool
}

// editOf starts an edit of v.
func editOf(v *downstream.View) *viewEdit {
	return &viewEdit{old: v, res: v.Resources, absent: v.Absent, unfound: v.Unfound, withdrawn: v.Withdrawn, errs: v.Errors, globs: v.AnsweredGlobs}
}

// resources returns the edit's own copy of the resources, to change.
func (e *viewEdit) resources() map[string]*downstream.Resource {
	if !e.resCopied {
		e.res, e.resCopied = maps.Clone(e.res), true
		if e.res == nil {
			e.res = make(map[string]*downstream.Resource)
		}
	}
	return e.res
}

// put sets the resource at key.
func (e *viewEdit) put(key string, r *downstream.Resource) { e.resources()[key] = r }

// drop removes the resource at key, if there is one.
func (e *viewEdit) drop(key string) {
	if _, ok := e.res[key]; ok {
		delete(e.resources(), key)
	}
}

// markAbsent records that the upstream said key does not exist.
func (e *viewEdit) markAbsent(key string) {
	if _, ok := e.absent[key]; ok {
		return
	}
	if !e.absentCopied {
		e.absent, e.absentCopied = maps.Clone(e.absent), true
		if e.absent == nil {
			e.absent = make(map[string]struct{})
		}
	}
	e.absent[key] = struct{}{}
}

// unmarkAbsent forgets that key does not exist.
func (e *viewEdit) unmarkAbsent(key string) {
	if _, ok := e.absent[key]; !ok {
		return
	}
	if !e.absentCopied {
		e.absent, e.absentCopied = maps.Clone(e.absent), true
	}
	delete(e.absent, key)
}

// answerGlob records that the upstream answered the glob collection's set,
// and reports whether it had not yet.
func (e *viewEdit) answerGlob(glob string) bool {
	if _, ok := e.globs[glob]; ok {
		return false
	}
	e.ownGlobs()
	e.globs[glob] = struct{}{}
	return true
}

// unanswerGlob forgets that the upstream answered the glob collection's set.
func (e *viewEdit) unanswerGlob(glob string) {
	if _, ok := e.globs[glob]; ok {
		e.ownGlobs()
		delete(e.globs, glob)
	}
}

func (e *viewEdit) ownGlobs() {
	if !e.globsCopied {
		e.globs, e.globsCopied = maps.Clone(e.globs), true
		if e.globs == nil {
			e.globs = make(map[string]struct{})
		}
	}
}

// markUnfound records that key is not found yet (View.Unfound: the
// upstream's silence, not its word), or, with on false, no longer.
func (e *viewEdit) markUnfound(key string, on bool) {
	if _, ok := e.unfound[key]; ok == on {
		return
	}
	if !e.unfoundCopied {
		e.unfound, e.unfoundCopied = maps.Clone(e.unfound), true
		if e.unfound == nil {
			e.unfound = make(map[string]struct{})
		}
	}
	if on {
		e.unfound[key] = struct{}{}
	} else {
		delete(e.unfound, key)
		e.withdraw(key, "")
	}
}

// withdraw records that key, unfound, had a cached copy at version that the
// relay took for gone (View.Withdrawn), or, with version "", forgets it.
func (e *viewEdit) withdraw(key, version string) {
	if e.withdrawn[key] == version {
		return
	}
	if !e.withdrawnCopied {
		e.withdrawn, e.withdrawnCopied = maps.Clone(e.withdrawn), true
		if e.withdrawn == nil {
			e.withdrawn = make(map[string]string)
		}
	}
	if version != "" {
		e.withdrawn[key] = version
	} else {
		delete(e.withdrawn, key)
	}
}

// setError records a TP3 error for key.
func (e *viewEdit) setError(key string, re *downstream.ResourceError) {
	e.ownErrors()
	e.errs[key] = re
}

// clearError removes key's error, if it has one.
func (e *viewEdit) clearError(key string) {
	if _, ok := e.errs[key]; !ok {
		return
	}
	e.ownErrors()
	delete(e.errs, key)
}

func (e *viewEdit) ownErrors() {
	if !e.errsCopied {
		e.errs, e.errsCopied = maps.Clone(e.errs), true
		if e.errs == nil {
			e.errs = make(map[string]*downstream.ResourceError)
		}
	}
}

// change records that key's version changed (removals included).
func (e *viewEdit) change(key string) {
	if e.changed == nil {
		e.changed = make(map[string]struct{})
	}
	e.changed[key] = struct{}{}
}

// view returns the next View: the old one's state with the edit applied,
// sequence number seq and the changed names, for the caller to publish.
func (e *viewEdit) view(seq uint64) *downstream.View {
	v := e.old.Next(seq, e.changed)
	v.Resources, v.Absent, v.Unfound, v.Withdrawn, v.Errors, v.AnsweredGlobs = e.res, e.absent, e.unfound, e.withdrawn, e.errs, e.globs
	return v
}
