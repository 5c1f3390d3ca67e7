package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsWithOverlays are the pages that show a user's own overlay, each as a
// YAML block that starts with the comment "# <dir>/kustomization.yaml", or
// as a shell here-document that writes <dir>/kustomization.yaml.
var docsWithOverlays = []string{"../README.md", "../docs/installation.md"}

var overlayBlock = regexp.MustCompile("(?s)```yaml\n *# ([a-z0-9-]+)/kustomization\\.yaml\n(.*?)```" +
	`|cat > ([a-z0-9-]+)/kustomization\.yaml <<'EOF'\n(.*?)\n *EOF\n`)

// TestDocumentedOverlaysBuild: every overlay the documentation tells a user
// to write builds against these manifests (its resources are named from the
// top of the repository, "../deploy/..."), replaces the manifests'
// placeholder image, and keeps the ConfigMap's other settings when it
// changes some.
func TestDocumentedOverlaysBuild(t *testing.T) {
	deployDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, page := range docsWithOverlays {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range overlayBlock.FindAllStringSubmatch(string(data), -1) {
			found++
			name, body := m[1]+m[3], dedent(m[2]+m[4])
			t.Run(filepath.Base(page)+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				rel, err := filepath.Rel(dir, deployDir)
				if err != nil {
					t.Fatal(err)
				}
				k := strings.ReplaceAll(body, "../deploy/", rel+"/")
				if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
					t.Fatal(err)
				}
				b := build(t, dir)
				var images []string
				for _, d := range b.deployments {
					images = append(images, container(t, d.Spec.Template.Spec).Image)
				}
				for _, d := range b.daemonSets {
					images = append(images, container(t, d.Spec.Template.Spec).Image)
				}
				for _, j := range b.jobs {
					images = append(images, container(t, j.Spec.Template.Spec).Image)
				}
				if len(images) == 0 {
					t.Fatal("builds no workload and no Job")
				}
				for _, img := range images {
					if img == image {
						t.Errorf("image %q: the overlay's images: entry did not replace the placeholder", img)
					}
				}
				workloads := len(b.deployments)
				for _, d := range b.daemonSets {
					if d.Name != cleanupName {
						workloads++
					}
				}
				if cm, ok := b.configMaps[configMap]; ok && workloads > 0 {
					for _, key := range []string{"OPENSHIFT_HA_VIRTUAL_IPS", "OPENSHIFT_HA_UNICAST_PEERS_FROM", "OPENSHIFT_HA_METRICS_ADDRESS"} {
						if cm.Data[key] == "" {
							t.Errorf("ConfigMap %s: %s missing after the overlay", configMap, key)
						}
					}
				} else if workloads > 0 {
					t.Errorf("no ConfigMap %s in the build (the workload's envFrom names it)", configMap)
				}
			})
		}
	}
	if found == 0 {
		t.Fatal("no overlay found in the documentation: the scan is broken")
	}
}

// dedent removes the indentation a Markdown list gives a code block.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}
