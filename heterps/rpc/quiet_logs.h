// gRPC's own log lines repeat, less clearly, what heterps's errors say: commands turn them off
// (GRPC_VERBOSITY brings them back). Declared without gRPC's headers, for the command line.
#pragma once

namespace heterps::rpc {

// Drops gRPC's and protobuf's own log lines unless GRPC_VERBOSITY is set.
void QuietLogs();

}  // namespace heterps::rpc
