package provider

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var updateCLIDocs = flag.Bool("update-cli-docs", false, "rewrite templates/actions and templates/list-resources from the schemas and examples")

// docAttr is what a docs page says about one attribute.
type docAttr struct {
	name, description string
	required          bool
	typ               attr.Type
}

func docType(t attr.Type) string {
	switch t {
	case types.StringType:
		return "String"
	case types.BoolType:
		return "Boolean"
	case types.Int64Type:
		return "Number"
	}
	return t.String()
}

// cliPage renders the registry page of a kind the docs generator cannot
// read from Terraform 1.11's schema output (actions, list resources): front
// matter, the description, the CLI it needs, the example and the schema.
func cliPage(name, kind, description, needs, exampleLang, example string, attrs []docAttr) string {
	var b strings.Builder
	first, _, _ := strings.Cut(description, ". ")
	fmt.Fprintf(&b, "---\npage_title: %q\nsubcategory: \"\"\ndescription: |-\n  %s\n---\n\n", name+" "+strings.ToLower(kind)+" - kohaku", strings.TrimSuffix(first, ".")+".")
	fmt.Fprintf(&b, "# %s (%s)\n\n%s\n\n%s\n\n## Example Usage\n\n```%s\n%s```\n\n## Schema\n", name, kind, description, needs, exampleLang, example)
	slices.SortFunc(attrs, func(a, b docAttr) int { return strings.Compare(a.name, b.name) })
	for _, group := range []struct {
		title    string
		required bool
	}{{"Required", true}, {"Optional", false}} {
		var lines []string
		for _, a := range attrs {
			if a.required == group.required {
				lines = append(lines, fmt.Sprintf("- `%s` (%s) %s", a.name, docType(a.typ), a.description))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n", group.title, strings.Join(lines, "\n"))
		}
	}
	return b.String()
}

// checkCLIPage compares a page under templates/ (copied to docs/ by make
// generate) with what the schema and the example make, or rewrites it.
func checkCLIPage(t *testing.T, rel, want string) {
	t.Helper()
	path := filepath.Join("..", "..", "templates", rel)
	if *updateCLIDocs {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("templates/%s is stale (%v): run go test ./internal/provider -run TestCLIDocs -update-cli-docs, then make generate", rel, err)
	}
}

func readExample(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Each action's page says what its schema says, with its example.
func TestCLIDocsActions(t *testing.T) {
	ctx := context.Background()
	p := &kohakuProvider{}
	for _, newAction := range p.Actions(ctx) {
		a := newAction()
		var meta action.MetadataResponse
		a.Metadata(ctx, action.MetadataRequest{ProviderTypeName: "kohaku"}, &meta)
		var s action.SchemaResponse
		a.Schema(ctx, action.SchemaRequest{}, &s)
		var attrs []docAttr
		for name, at := range s.Schema.Attributes {
			attrs = append(attrs, docAttr{name: name, description: at.GetDescription(), required: at.IsRequired(), typ: at.GetType()})
		}
		short := strings.TrimPrefix(meta.TypeName, "kohaku_")
		page := cliPage(meta.TypeName, "Action", s.Schema.Description,
			"Actions need Terraform 1.14 or later: older Terraform versions and OpenTofu refuse an `action` block, so keep actions in configurations that Terraform 1.14 or later runs.",
			"terraform", readExample(t, filepath.Join("actions", meta.TypeName, "action.tf")), attrs)
		checkCLIPage(t, filepath.Join("actions", short+".md"), page)
	}
}

// Each list resource's page says what its schema says, with its example.
func TestCLIDocsListResources(t *testing.T) {
	ctx := context.Background()
	p := &kohakuProvider{}
	for _, newList := range p.ListResources(ctx) {
		l := newList()
		var meta resource.MetadataResponse
		l.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "kohaku"}, &meta)
		var s list.ListResourceSchemaResponse
		l.ListResourceConfigSchema(ctx, list.ListResourceSchemaRequest{}, &s)
		var attrs []docAttr
		for name, at := range s.Schema.Attributes {
			attrs = append(attrs, docAttr{name: name, description: at.GetDescription(), required: at.IsRequired(), typ: at.GetType()})
		}
		short := strings.TrimPrefix(meta.TypeName, "kohaku_")
		page := cliPage(meta.TypeName, "List Resource", s.Schema.Description,
			"List resources need Terraform 1.14 or later (`terraform query`, with the `list` blocks in `.tfquery.hcl` files); "+
				"older Terraform versions and OpenTofu do not read those files, so they can sit beside any configuration.",
			"terraform", readExample(t, filepath.Join("list-resources", meta.TypeName, "list-resource.tfquery.hcl")), attrs)
		checkCLIPage(t, filepath.Join("list-resources", short+".md"), page)
	}
}
