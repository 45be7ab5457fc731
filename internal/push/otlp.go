package push

import (
	"fmt"
	"net/url"
)

// newOTLP will return the OTLP backend for u (scheme already http or https).
// It is not built yet: it says so.
func newOTLP(u *url.URL, o Options) (Backend, error) {
	return nil, fmt.Errorf("push to otlp: not built yet (use pyroscope://HOST:PORT, or --switch-output for local files)")
}
