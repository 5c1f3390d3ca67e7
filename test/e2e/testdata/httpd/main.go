// Command httpd is the monitored service of the end-to-end tests: it
// answers every request with the name it was given, so a client probing a
// VIP learns which node holds it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
)

func main() {
	listen := flag.String("listen", ":8080", "address to listen on")
	name := flag.String("name", "", "name to answer with")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, *name)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
