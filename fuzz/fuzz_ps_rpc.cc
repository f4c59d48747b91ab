// The parameter server's RPC handlers (ps/rpc/ps_server.h) against any request: one real server on
// loopback, one real gRPC stub, each input one call. The first byte picks the method, the rest is
// the request's wire form (a chunk, for the PushDense stream, sent once or several times). The
// server must answer every call, whatever it holds, and keep serving; a table is created first so
// that the data calls reach the tables' code.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "fuzz/fuzz_target.h"
#include "grpcpp/grpcpp.h"
#include "heterps/ps/rpc/ps.grpc.pb.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/quiet_logs.h"
#include "heterps/rpc/rpc.h"

namespace {

namespace wire = heterps::ps::rpc;

struct Harness {
  std::unique_ptr<heterps::ps::rpc::PsServer> server;
  std::unique_ptr<wire::ParameterServer::Stub> stub;
};

Harness* Start() {
  heterps::rpc::QuietLogs();
  auto* h = new Harness;
  heterps::ps::rpc::PsServerOptions options;
  options.data_dir = heterps::fuzz::ScratchPath("ps_rpc");
  auto server = heterps::ps::rpc::PsServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "fuzz_ps_rpc: %s\n", std::string(server.status().message()).c_str());
    std::exit(2);
  }
  h->server = std::move(*server);
  h->stub = wire::ParameterServer::NewStub(heterps::rpc::NewChannel(h->server->address()));
  // Table 0: sparse, dim 4; table 1: dense, two blocks.
  grpc::ClientContext ctx;
  wire::CreateTableRequest sparse;
  sparse.set_table(0);
  sparse.mutable_sparse()->set_dim(4);
  wire::CreateTableReply reply;
  (void)h->stub->CreateTable(&ctx, sparse, &reply);
  grpc::ClientContext ctx2;
  wire::CreateTableRequest dense;
  dense.set_table(1);
  dense.mutable_dense()->add_block_sizes(8);
  dense.mutable_dense()->add_block_sizes(3);
  (void)h->stub->CreateTable(&ctx2, dense, &reply);
  return h;
}

template <typename Request>
bool Parse(const uint8_t* data, size_t size, Request* request) {
  return request->ParseFromArray(data, static_cast<int>(size));
}

// A unary call of `method` with the input's request, if it parses as one.
template <typename Request, typename Reply>
void Unary(wire::ParameterServer::Stub& stub,
           grpc::Status (wire::ParameterServer::Stub::*method)(grpc::ClientContext*, const Request&,
                                                               Reply*),
           grpc::ClientContext* ctx, const uint8_t* data, size_t size) {
  Request request;
  Reply reply;
  if (Parse(data, size, &request)) (void)(stub.*method)(ctx, request, &reply);
}

void Deadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = Start();
  if (size < 1) return 0;
  const uint8_t method = data[0] % 10;
  ++data;
  --size;
  grpc::ClientContext ctx;
  Deadline(ctx);
  switch (method) {
    case 0:
      Unary(*h->stub, &wire::ParameterServer::Stub::CreateTable, &ctx, data, size);
      break;
    case 1:
      Unary(*h->stub, &wire::ParameterServer::Stub::PullSparse, &ctx, data, size);
      break;
    case 2:
      Unary(*h->stub, &wire::ParameterServer::Stub::ExportRows, &ctx, data, size);
      break;
    case 3:
      Unary(*h->stub, &wire::ParameterServer::Stub::ImportRows, &ctx, data, size);
      break;
    case 4:
      Unary(*h->stub, &wire::ParameterServer::Stub::PushSparse, &ctx, data, size);
      break;
    case 5: {
      wire::PullDenseRequest request;
      if (!Parse(data, size, &request)) break;
      auto reader = h->stub->PullDense(&ctx, request);
      wire::DenseChunk chunk;
      while (reader->Read(&chunk)) {
      }
      (void)reader->Finish();
      break;
    }
    case 6: {
      // The chunk sent 1 to 3 times: the first message's header, then continuations.
      wire::PushDenseChunk chunk;
      if (!Parse(data, size, &chunk)) break;
      wire::PushReply reply;
      auto writer = h->stub->PushDense(&ctx, &reply);
      const int times = 1 + static_cast<int>(size % 3);
      for (int i = 0; i < times && writer->Write(chunk); ++i) {
      }
      writer->WritesDone();
      (void)writer->Finish();
      break;
    }
    case 7: {
      wire::CommitReply reply;
      (void)h->stub->Commit(&ctx, wire::CommitRequest(), &reply);
      break;
    }
    case 8:
      Unary(*h->stub, &wire::ParameterServer::Stub::LoadCheckpoint, &ctx, data, size);
      break;
    default: {
      wire::StatsReply reply;
      (void)h->stub->Stats(&ctx, wire::StatsRequest(), &reply);
      break;
    }
  }
  // Still serving.
  grpc::ClientContext info_ctx;
  Deadline(info_ctx);
  wire::InfoReply info;
  if (!h->stub->Info(&info_ctx, wire::InfoRequest(), &info).ok()) {
    std::fprintf(stderr, "fuzz_ps_rpc: the server stopped answering\n");
    std::abort();
  }
  return 0;
}
