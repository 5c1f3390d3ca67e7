package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HTTPClient returns a client whose connections are made from the client
// namespace; URLs must use IP literals. Keep-alives are off, so every
// request opens a new connection and reaches the VIP's current holder.
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:       c.Client.Dial,
			DisableKeepAlives: true,
		},
	}
}

// Get fetches url from the client namespace and returns the body.
func (c *Cluster) Get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}
