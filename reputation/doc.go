// Package reputation owns peer scoring: verdicts in, scores and bans out.
//
// It is pure: no I/O, goroutines or clock. Every call takes the time, peers
// are keyed by string (a peer ID's String()), and it imports nothing of
// ours. A Book is safe for concurrent use, so stream handlers, the averager
// and gossipsub's AppSpecificScore callback can share one.
//
// # Scoring
//
// Each verdict adds its weight to the peer's score, which is capped at
// MaxScore and decays exponentially towards 0 with HalfLife, so old credit
// and old sins both fade. The score sets the state: below IgnoreBelow the
// peer is not chosen as a partner and its models are not merged, below
// DisconnectBelow its connections are closed too, and below BanBelow it is
// banned for BanFor, after which it starts over at 0. Verdicts during a ban
// are counted but do not extend it.
//
// # Defaults
//
//	Accepted +1   Clipped 0     Timeout -0.5   Rejected -1.5
//	Outlier -5    LossJump -5   FingerprintMismatch -5
//	ProtocolViolation -10       NonFinite -20
//	MaxScore 20, HalfLife 5m, thresholds -10 / -20 / -40, BanFor 1h, MaxPeers 4096
//
// The bar: an honest peer is never banned, even though slow peers time out
// now and then, honest peers with unusual data get clipped, and a dropped
// connection truncates a frame; a peer whose every model is an outlier or
// non-finite is banned within a handful of exchanges.
//
// Honest peers. Decay only moves a score towards 0 and the cap only bites
// above 0, so at any pace the score never falls below the lowest sum of the
// weights of a run of consecutive verdicts. Take a stream in which every 10
// consecutive verdicts hold at least 5 Accepted, at most 1 Rejected and
// otherwise Clipped or Timeout: each such run nets at least
// 5 - 4*0.5 - 1.5 = +1.5 and any shorter run at least -3.5, so the score
// never falls below -3.5 and the peer is never even ignored. Streams drawn
// at random at those worst rates (50% Accepted, 40% Timeout, 10% Rejected)
// drift up by 0.15 a verdict; the chance that such a walk ever ends up 40
// below where it started is under exp(-40*0.364), about 5e-7. This is why
// Rejected costs 1.5: at -5 the same stream drifts down and is banned in
// the end, at -2 the margin is thin.
//
// Attackers. Sent back to back, so that decay does not help, a peer's
// verdicts take it to ignored / disconnected / banned after this many:
//
//	                              fresh (0)      clean record (20)
//	NonFinite                     1 / 2 / 3      2 / 3 / 4
//	ProtocolViolation             2 / 3 / 5      4 / 5 / 7
//	Outlier, LossJump,
//	FingerprintMismatch           3 / 5 / 9      7 / 9 / 13
//	Rejected                      7 / 14 / 27    21 / 27 / 41
//	Timeout                       21 / 41 / 81   61 / 81 / 121
//
// A mix of outliers and non-finite models is banned within the outlier
// counts. Decay works for the attacker too: one outlier every d settles at
// -5/(1-2^(-d/HalfLife)), so it is banned only if d < 58s (0.19 HalfLife),
// disconnected if d < 2m05s and ignored if d < 5m; one every 25s is banned
// after 11. Non-finite models get it banned at any pace under 5m. Slower
// than that, it costs one refused merge now and then, which is harmless:
// refused models are never merged whatever the score says. The half life is
// 5m rather than shorter for that reason: a pair in a large swarm meets
// only every few tens of seconds.
//
// MaxPeers bounds memory against an attacker cycling through identities;
// eviction keeps bans, so a banned peer cannot be forgotten by flooding the
// book with new ones.
//
// # Use
//
//	book, err := reputation.New(reputation.DefaultParams())
//	// in the averager, after a merge attempt:
//	switch book.Record(peer.String(), reputation.Outlier, time.Now()) {
//	case reputation.Disconnected, reputation.Banned:
//		host.Network().ClosePeer(peer)
//	}
//	// before choosing a partner:
//	if book.State(id, now) != reputation.OK { continue }
//	// gossipsub:
//	pubsub.WithPeerScore(&pubsub.PeerScoreParams{
//		AppSpecificScore: func(p peer.ID) float64 { return book.AppScore(p.String(), time.Now()) },
//		...
//	}, thresholds)
package reputation
