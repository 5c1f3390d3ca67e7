package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// ScrapeResult is what concurrent scrapers saw.
type ScrapeResult struct {
	Latencies []time.Duration
	// Bytes is the size of the last body.
	Bytes int
	// Errors counts failed requests; FirstError is the first one.
	Errors     int
	FirstError error
}

// Scrape runs n scrapers that GET url back to back for d, each over its
// own kept-alive connection made with dial (Prometheus keeps its
// connections too), and times each request until its body is read.
func Scrape(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), url string, n int, d time.Duration) ScrapeResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var res ScrapeResult
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			tr := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for ctx.Err() == nil {
				start := time.Now()
				size, err := get(ctx, client, url)
				took := time.Since(start)
				if ctx.Err() != nil {
					return // cut short by the end of the run
				}
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstError == nil {
						res.FirstError = err
					}
				} else {
					res.Latencies = append(res.Latencies, took)
					res.Bytes = size
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return res
}

func get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return int(n), nil
}
