// Package payload turns a snapshot's canonical plaintext byte stream into a stored, encrypted,
// checksummed payload and back, and holds the stores that keep payloads (chunked Secrets in the
// hub, a local folder, object storage).
//
// # Format (version 1)
//
// The plaintext is gzip-compressed and the compressed stream is cut into frames of at most
// 64 KiB, each sealed separately with AES-256-GCM under a fresh random 32-byte data key (DEK).
// The DEK is wrapped by a key-encryption key (KEK, see KeyWrapper): envelope encryption.
//
//	header:
//	  magic        4 bytes  "RWSP"
//	  version      1 byte   1
//	  kekIDLen     1 byte   then kekID (the KeyWrapper's ID, names the key the payload needs)
//	  wrappedLen   2 bytes  big endian, then the wrapped DEK
//	  noncePrefix  8 bytes  random per payload
//	  headerSum    4 bytes  first 4 bytes of SHA-256 of the header bytes before it
//	frames, repeated:
//	  kind         1 byte   0 = data, 1 = final
//	  length       4 bytes  big endian length of the sealed frame (tag included)
//	  sealed       AES-GCM(DEK, nonce = noncePrefix || uint32 counter,
//	                       additional data = SHA-256(header) || uint32 counter || kind)
//
// Data frames carry compressed bytes. The final frame is always the last thing in the stream
// and carries the SHA-256 and the length of the whole plaintext. Because the counter and the
// final flag are authenticated, reordered, dropped, duplicated or appended frames are detected,
// and a stream that ends before its final frame is reported as truncated, never as a clean end.
// A reader holds one frame at a time, so memory does not grow with the payload.
package payload
