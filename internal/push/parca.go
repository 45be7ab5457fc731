package push

import (
	"fmt"
	"net/url"
)

// newParca will return the Parca backend for u (scheme already http or https).
// It is not built yet: it says so.
func newParca(u *url.URL, o Options) (Backend, error) {
	return nil, fmt.Errorf("push to parca: not built yet (use pyroscope://HOST:PORT, or --switch-output for local files)")
}
