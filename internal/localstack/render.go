package localstack

import (
	"bytes"
	"fmt"
	"text/template"

	"github.com/eventforge/eventforge/deploy/local"
)

// render executes the embedded deploy/local template name with data; a
// placeholder data does not name is an error.
func render(name string, data map[string]string) ([]byte, error) {
	src, err := local.Files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading embedded %s: %w", name, err)
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("parsing %s template: %w", name, err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("rendering %s: %w", name, err)
	}
	return b.Bytes(), nil
}
