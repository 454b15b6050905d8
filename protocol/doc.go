// Package protocol holds the names of the wire contract (docs/PROTOCOL.md)
// that the worker and its clients share: subjects, header names, content
// types, error codes, defaults and the rules for a subject prefix.
//
// It imports nothing but the standard library, so that a flownode or a
// frontend that imports the client package does not link the worker.
package protocol
