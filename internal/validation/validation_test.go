package validation

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestPaths(t *testing.T) {
	t.Parallel()
	built := Root("network").Index(0).Name("addresses").Index(1)
	if built.String() != "network[0].addresses[1]" {
		t.Errorf("String %q", built)
	}
	for _, c := range []struct {
		in   string
		want Path
	}{
		{"network[0].addresses[1]", built},
		{`meta_data["instance-id"]`, Root("meta_data").Key("instance-id")},
		{"user.ssh_authorized_keys[2]", Root("user").Name("ssh_authorized_keys").Index(2)},
		{"spec", Root("spec")},
		{"broken[x", Path{{Name: "broken[x"}}},
	} {
		if got := ParsePath(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParsePath(%q) = %#v, want %#v", c.in, got, c.want)
		}
		if c.in != "broken[x" && ParsePath(c.in).String() != c.in {
			t.Errorf("%q does not round-trip: %q", c.in, ParsePath(c.in))
		}
	}
	if !built.HasPrefix(Root("network").Index(0)) || built.HasPrefix(Root("network").Index(1)) {
		t.Error("HasPrefix")
	}
	// Steps copy: extending a path leaves it as it was.
	base := Root("a").Index(0)
	x, y := base.Name("x"), base.Name("y")
	if x.String() != "a[0].x" || y.String() != "a[0].y" {
		t.Errorf("shared backing array: %s %s", x, y)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	kind, cause := errors.New("invalid spec"), errors.New("bad yaml")
	e := &Error{Path: Root("vcpu"), Problem: "0 is outside 1..512", Example: "2", Kind: kind, Err: cause}
	if e.Error() != "vcpu: 0 is outside 1..512 (for example 2)" {
		t.Errorf("Error %q", e)
	}
	joined := fmt.Errorf("rendering: %w", errors.Join(e, &Error{Path: Root("name"), Problem: "is empty", Kind: kind}))
	if !errors.Is(joined, kind) || !errors.Is(joined, cause) {
		t.Error("errors.Is does not find the kind and the cause")
	}
	if all := All(joined); len(all) != 2 || all[1].Path.String() != "name" {
		t.Errorf("All %v", all)
	}
}
