# The gradient message as a Cap'n Proto user would write it.
@0xad17999f6c0810d7;
$import "/capnp/c++.capnp".namespace("ferry::bench::cp");
struct Gradient {
  values @0 :List(Float32);
}
