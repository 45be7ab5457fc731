package output

import (
	"bytes"
	"github.com/gprofile/gprofile/internal/testutil"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeFlamePage writes the fixture's flame graph to a file and returns
// the file's URL.
func writeFlamePage(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteFlameHTML(&buf, newFixture().aggregate(), "gprofile fixture"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "flame.html")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + file
}

// frameRx matches the frame groups d3-flame-graph draws, one per node.
var frameRx = regexp.MustCompile(`<g [^>]*name="([^"]*)" class="frame[^"]*">`)

// TestFlameHTMLInChromium loads the flame graph in a headless browser and
// checks that the library drew a frame for every node of the tree, named
// after it, and that a search given in the URL highlights frames.
func TestFlameHTMLInChromium(t *testing.T) {
	url := writeFlamePage(t)
	dom := string(testutil.RunChromium(t, url+"#search=fact", "--dump-dom"))
	if !strings.Contains(dom, `<svg width=`) || !strings.Contains(dom, `class="partition d3-flame-graph"`) {
		t.Fatalf("no flame graph svg in the rendered page:\n%.2000s", dom)
	}
	drawn := map[string]int{}
	for _, m := range frameRx.FindAllStringSubmatch(dom, -1) {
		drawn[m[1]]++
	}
	want := map[string]int{}
	var count func(n *flameNode)
	count = func(n *flameNode) {
		want[strings.NewReplacer("&", "&amp;", `"`, "&quot;").Replace(n.Name)]++
		for _, c := range n.Children {
			count(c)
		}
	}
	count(flameTree(newFixture().aggregate()))
	for name, n := range want {
		if drawn[name] != n {
			t.Errorf("%d frames named %q drawn, want %d", drawn[name], name, n)
		}
	}
	for _, name := range []string{"all", "compute", "square", "fact", "vfs_write_[k]", "clear_page_erms_[k]", "[vdso+0x9d0]"} {
		if drawn[name] == 0 {
			t.Errorf("no frame drawn for %s", name)
		}
	}
	// Labels are written when the first picture is drawn, not animated.
	for _, name := range []string{"compute", "vfs_write_[k]", "__libc_start_call_main"} {
		if !regexp.MustCompile(`class="d3-flame-graph-label"[^>]*>` + regexp.QuoteMeta(name) + `</div>`).MatchString(dom) {
			t.Errorf("no label %q drawn", name)
		}
	}
	if !strings.Contains(dom, "search: 5 of 20 samples (25.00%)") {
		t.Errorf("search from the URL not applied: no search summary in the page")
	}
	if n := strings.Count(dom, `fill="#E600E6"`); n != 2 {
		t.Errorf("%d highlighted frames, want the 2 fact frames", n)
	}
}

// TestFlameHTMLScreenshot renders the flame graph in headless Chromium
// and checks that the picture holds the whole flame graph: the fixture's
// frames cover 35,416 of the pixels counted, less where text is drawn.
// A picture taken while frames still grow (once in seven runs before
// flame.html redrew a resize without animation: Chromium resizes the
// window after load for --window-size) has a tenth fewer or less.
func TestFlameHTMLScreenshot(t *testing.T) {
	url := writeFlamePage(t)
	if warm := warmPixels(t, url); warm < 33000 {
		t.Errorf("screenshot has %d warm pixels (of every 4th), want the whole flame graph's 35,416 or nearly", warm)
	}
}

// warmPixels takes a 1200x800 screenshot of url and counts its warm
// (flame-coloured) pixels, every 4th pixel.
func warmPixels(t *testing.T, url string) int {
	shot := filepath.Join(t.TempDir(), "flame.png")
	testutil.RunChromium(t, url, "--screenshot="+shot, "--window-size=1200,800", "--hide-scrollbars")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 800 {
		t.Errorf("screenshot is %v, want 1200x800", b)
	}
	warm := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r > 0xc000 && g < 0xb000 && bl < 0x8000 {
				warm++
			}
		}
	}
	return warm
}
