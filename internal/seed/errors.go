package seed

import (
	"errors"

	"github.com/kohaku/terraform-provider-kohaku/internal/validation"
)

// ErrInvalidSpec matches (with errors.Is) every *ValidationError.
var ErrInvalidSpec = errors.New("invalid seed spec")

// ValidationError says which input is wrong (a path of steps, e.g.
// network[0].addresses[1] or meta_data["instance-id"]), what is wrong with
// it and what a right value looks like: the one shape seed and domain share.
type ValidationError = validation.Error

// invalid is a problem at a written path.
func invalid(path, problem, example string, cause error) *ValidationError {
	return &ValidationError{Path: validation.ParsePath(path), Problem: problem, Example: example, Err: cause, Kind: ErrInvalidSpec}
}

// ValidationErrors returns every *ValidationError inside err (which may be a
// single one or the errors.Join of several, as Validate returns).
func ValidationErrors(err error) []*ValidationError { return validation.All(err) }

// problems collects validation errors in input order.
type problems struct{ list []error }

func (p *problems) add(path, problem, example string) {
	p.list = append(p.list, invalid(path, problem, example, nil))
}

func (p *problems) addErr(path, problem, example string, cause error) {
	p.list = append(p.list, invalid(path, problem, example, cause))
}

func (p *problems) err() error { return errors.Join(p.list...) }
