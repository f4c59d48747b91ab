// What a stage worker decodes from its neighbours (worker/rpc/codec.h): a Forward (a micro-batch's
// activations, keys and labels), a Backward (an answer: gradients or probabilities) and a
// DenseShare (a message of its stage's dense exchange), each from the input's bytes as a peer
// could send them. Every array's size is checked against the sample
// count before it is used; a message that disagrees is an error, never a read past an array.
#include "fuzz/fuzz_target.h"
#include "heterps/worker/rpc/codec.h"
#include "heterps/worker/rpc/worker.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace wire = heterps::worker::wire;
  wire::Forward forward;
  if (forward.ParseFromArray(data, static_cast<int>(size))) {
    heterps::worker::ForwardHeader header;
    heterps::worker::Activations activations;
    (void)heterps::worker::rpc::DecodeForward(forward, &header, &activations);
  }
  wire::Backward backward;
  if (backward.ParseFromArray(data, static_cast<int>(size))) {
    heterps::worker::Answer answer;
    (void)heterps::worker::rpc::DecodeAnswer(backward, &answer);
  }
  wire::DenseShare share;
  if (share.ParseFromArray(data, static_cast<int>(size))) {
    heterps::worker::DenseMessage message;
    (void)heterps::worker::rpc::DecodeDense(share, &message);
  }
  return 0;
}
