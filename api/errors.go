package api

import "errors"

// Errors callers branch on with errors.Is.
var (
	// ErrBadConfig is wrapped by every Config.Validate error.
	ErrBadConfig = errors.New("api: bad config")
	// ErrBadAddr reports a listen or node address that cannot be used.
	ErrBadAddr = errors.New("api: bad address")
	// ErrUnreachable reports that no node API answered at the address.
	ErrUnreachable = errors.New("api: node unreachable")
	// ErrResponse reports an answer that is not what the API documents:
	// an error status, a body that does not decode, or one too large.
	ErrResponse = errors.New("api: unexpected response")
)
