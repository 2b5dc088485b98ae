package seed

import (
	"errors"
	"strings"
)

// ErrInvalidSpec matches (with errors.Is) every *ValidationError.
var ErrInvalidSpec = errors.New("invalid seed spec")

// ValidationError says which input is wrong, what is wrong with it and what
// a right value looks like. Path is attribute-like, e.g.
// "network[0].addresses[1]" or `meta_data["instance-id"]`.
type ValidationError struct {
	Path    string
	Problem string
	Example string
	// Err is the underlying cause, if any (e.g. a parse error).
	Err error
}

// Error formats as "<path>: <problem> (example: <example>)"; the example part
// is left out when there is none.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	b.WriteString(": ")
	b.WriteString(e.Problem)
	if e.Example != "" {
		b.WriteString(" (example: ")
		b.WriteString(e.Example)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *ValidationError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidSpec.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidSpec }

// ValidationErrors returns every *ValidationError inside err (which may be a
// single one or the errors.Join of several, as Validate returns).
func ValidationErrors(err error) []*ValidationError {
	var out []*ValidationError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if ve, ok := e.(*ValidationError); ok {
			out = append(out, ve)
			return
		}
		switch u := e.(type) {
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

// problems collects validation errors in input order.
type problems struct{ list []error }

func (p *problems) add(path, problem, example string) {
	p.list = append(p.list, &ValidationError{Path: path, Problem: problem, Example: example})
}

func (p *problems) addErr(path, problem, example string, cause error) {
	p.list = append(p.list, &ValidationError{Path: path, Problem: problem, Example: example, Err: cause})
}

func (p *problems) err() error { return errors.Join(p.list...) }
