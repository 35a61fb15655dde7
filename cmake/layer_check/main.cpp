// The entry point of the layer checks (src/CMakeLists.txt, fsdp_layer_check_<layer>): a program
// linked from one layer's objects and those of the layers below it, so that a call upward fails
// its link. It is never run.
int main() {
  return 0;
}
