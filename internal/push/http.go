package push

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// maxErrorBody caps how much of a refusal's body goes into the error.
const maxErrorBody = 512

// post sends body to url with content type ctype and o's headers, and
// returns the response body of a 2xx answer. Any other status is an
// error (statusError): permanent for 4xx but 408 and 429, retried
// otherwise. Transport errors are retried.
func post(ctx context.Context, o Options, url, ctype string, body []byte, header http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	for k, vs := range o.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, statusError(url, resp.StatusCode, data)
	}
	return data, nil
}

// statusError describes a refusal with its status and the start of its
// body, wrapping ErrPermanent for the 4xx statuses that a retry will not
// change (all but 408 Request Timeout and 429 Too Many Requests).
func statusError(url string, code int, body []byte) error {
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	err := fmt.Errorf("%s answered %d %s: %s", url, code, http.StatusText(code), bytes.TrimSpace(body))
	if code/100 == 4 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	return err
}
