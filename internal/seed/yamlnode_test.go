package seed

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// TestYAMLStringsRoundTrip: every string the documents carry reads back
// unchanged, leading newlines of file content included.
func TestYAMLStringsRoundTrip(t *testing.T) {
	for _, s := range []string{
		"\nstarts with a newline\n", "\n\ntwo\n", "\n", "plain", "two\nlines\n",
		"no final newline\nx", "  indented\nfirst line\n", "tab\tinside\n", "0644", "yes",
	} {
		out, err := yaml.Marshal(ystr(s))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		var back string
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q: %v\n%s", s, err, out)
		}
		if back != s {
			t.Errorf("%q written as\n%s\nreads back as %q", s, out, back)
		}
	}
}
