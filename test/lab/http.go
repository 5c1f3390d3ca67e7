package lab

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
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

// ServeName is a node's checked service, run as a program of its own on
// the node (the demo and test/cmd/chaos run themselves with "serve"): it
// answers every HTTP request with the node's name, so a client probing a
// VIP learns which node holds it. args are the flags after "serve":
// -listen ADDRESS (":8080") and -name NAME. It returns the exit code.
func ServeName(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "address to listen on")
	name := fs.String("name", "", "name to answer with")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, *name) })}
	log.Info("serving", "address", *listen, "name", *name)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "address", *listen, "error", err)
		return 1
	}
	return 0
}
