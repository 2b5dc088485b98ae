package provider

import (
	"os"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// The docs list exactly what domain.Merge owns, from domain.Owned.
func TestDocsListWhatKohakuOwns(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../templates/resources/vm.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(string(b), "## What Kohaku owns in a domain")
	list, _, _ = strings.Cut(list, "\n## ")
	var got []string
	for line := range strings.SplitSeq(list, "\n") {
		if item, ok := strings.CutPrefix(line, "- "); ok {
			got = append(got, item)
		}
	}
	if strings.Join(got, "\n") != strings.Join(domain.Owned, "\n") {
		t.Errorf("templates/resources/vm.md.tmpl lists\n%s\nbut domain.Owned is\n%s", strings.Join(got, "\n"), strings.Join(domain.Owned, "\n"))
	}
}
