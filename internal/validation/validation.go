// Package validation is the one shape of an input problem that the seed and
// domain packages report: where (a path of steps: attribute names, list
// indices, map keys), what is wrong, and what a right value looks like. The
// provider turns these into diagnostics by walking the steps, never by
// parsing strings.
package validation

import (
	"strconv"
	"strings"
)

// Step is one step of a path: an attribute name, a list index or a map key.
type Step struct {
	Name  string
	Index int
	Key   string
	Kind  StepKind
}

// StepKind says which of a Step's fields holds it.
type StepKind int

// A step is a field name (Name), a list index (Index) or a map key (Key).
const (
	StepName StepKind = iota
	StepIndex
	StepKey
)

// Path leads from a spec's top to the value at fault, e.g.
// network[0].addresses[1] is Root("network").Index(0).Name("addresses").Index(1).
type Path []Step

// Root starts a path at an attribute.
func Root(name string) Path { return Path{{Name: name}} }

func (p Path) with(s Step) Path {
	out := make(Path, len(p), len(p)+1)
	copy(out, p)
	return append(out, s)
}

// Name steps into an attribute.
func (p Path) Name(name string) Path { return p.with(Step{Name: name}) }

// Index steps into a list element.
func (p Path) Index(i int) Path { return p.with(Step{Index: i, Kind: StepIndex}) }

// Key steps into a map element.
func (p Path) Key(k string) Path { return p.with(Step{Key: k, Kind: StepKey}) }

// String writes the path as network[0].addresses[1] or meta_data["k"].
func (p Path) String() string {
	var b strings.Builder
	for _, s := range p {
		switch s.Kind {
		case StepName:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Name)
		case StepIndex:
			b.WriteString("[" + strconv.Itoa(s.Index) + "]")
		case StepKey:
			b.WriteString("[" + strconv.Quote(s.Key) + "]")
		}
	}
	return b.String()
}

// HasPrefix reports whether p starts with q.
func (p Path) HasPrefix(q Path) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if p[i] != q[i] {
			return false
		}
	}
	return true
}

// ParsePath reads the written form back (network[0].addresses[1],
// meta_data["k"]); the packages that report problems write their paths
// this way where a literal reads better than chained steps. A malformed
// path comes back as a single name holding all of it.
func ParsePath(s string) Path {
	var p Path
	i := 0
	for i < len(s) {
		switch s[i] {
		case '.':
			i++
		case '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return Path{{Name: s}}
			}
			inner := s[i+1 : i+end]
			if n, err := strconv.Atoi(inner); err == nil {
				p = append(p, Step{Index: n, Kind: StepIndex})
			} else if k, err := strconv.Unquote(inner); err == nil {
				p = append(p, Step{Key: k, Kind: StepKey})
			} else {
				return Path{{Name: s}}
			}
			i += end + 1
		default:
			j := i
			for j < len(s) && s[j] != '.' && s[j] != '[' {
				j++
			}
			p = append(p, Step{Name: s[i:j]})
			i = j
		}
	}
	return p
}

// Error is one problem with an input.
type Error struct {
	Path    Path
	Problem string // what is wrong
	Example string // what a right value looks like; may be empty
	// Err is the underlying cause (a parse error, ...), if any.
	Err error
	// Kind is the package's sentinel (seed.ErrInvalidSpec,
	// domain.ErrInvalidSpec), so errors.Is tells whose problem it is.
	Kind error
}

// Error formats as "<path>: <problem> (for example <example>)"; the example
// part is left out when there is none.
func (e *Error) Error() string {
	s := e.Path.String() + ": " + e.Problem
	if e.Example != "" {
		s += " (for example " + e.Example + ")"
	}
	return s
}

// Unwrap exposes Kind and Err to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	var out []error
	for _, x := range []error{e.Kind, e.Err} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// All returns every *Error inside err (a single one, a slice type that
// unwraps to several, or an errors.Join of them), in order.
func All(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		// A manual walk, not errors.As: As stops at the first match and
		// every one is wanted, in order.
		if ve, ok := e.(*Error); ok { //nolint:errorlint // the walk itself unwraps
			out = append(out, ve)
			return
		}
		switch u := e.(type) { //nolint:errorlint // the walk itself unwraps
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
