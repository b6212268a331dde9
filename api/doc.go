// Package api serves a node over HTTP: the REST API (/v1/status, /v1/peers,
// /v1/history, /v1/model, /v1/checkpoints), health probes (/healthz,
// /readyz), Prometheus metrics (/metrics, on the server's own registry) and
// the live dashboard (/), embedded in the binary. It also holds the client
// that `meshtrain status` and `meshtrain peers` use.
//
// The server reads the node through the small Source interface, so it can
// be tested against a fake; *node.Node implements it. Every JSON object the
// API sends is a type of this package (types.go), converted from the
// node's values in convert.go; the client decodes into the same types, so
// callers never see node, store or gossip types. JSON fields are
// snake_case, durations seconds (suffix _s), sizes bytes; docs/api.md and
// docs/openapi.yaml describe every endpoint.
//
//	l, err := api.Listen("127.0.0.1:8080")
//	if err != nil { ... }
//	srv, err := api.New(n, api.DefaultConfig())
//	if err != nil { ... }
//	go srv.Serve(l)
//	defer srv.Shutdown(context.Background())
//
//	c, _ := api.NewClient("127.0.0.1:8080", nil)
//	st, err := c.Status(ctx)
package api
