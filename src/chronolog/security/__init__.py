"""Authentication and authorization, sans I/O: SCRAM and PLAIN servers, the credentials file, the ACL
model and authorizer, listener parsing and TLS contexts. Imports only `config` and `errors`, so the
protocol handlers, the server and the CLI can all build on it."""
