# One helper per target kind, so that each folder's CMakeLists reads like a table of contents.

# heterps_cc_library(NAME name SRCS ... DEPS ...)
function(heterps_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
endfunction()

# heterps_cc_test(NAME name SRCS ... DEPS ... [LABELS ...])
# Unit tests get the label "unit" (run again under the sanitizers); others name their own.
function(heterps_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  # A tree built for the fast unit tests alone (the sanitizer run) does not build the others.
  if(HETERPS_UNIT_TESTS_ONLY AND (NOT "unit" IN_LIST ARG_LABELS OR "heavy" IN_LIST ARG_LABELS))
    return()
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  # HETERPS_TEST_COMPILE_OPTIONS: for the tests' own sources only (the sanitizer run compiles them
  # at -O0: the code they test keeps the build's optimisation).
  target_compile_options(${ARG_NAME} PRIVATE ${HETERPS_TEST_COMPILE_OPTIONS})
  target_compile_definitions(${ARG_NAME} PRIVATE
    HETERPS_SOURCE_DIR="${PROJECT_SOURCE_DIR}" HETERPS_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  # A test that cannot run here (no GPU) says so with GTEST_SKIP: reported as skipped, not passed.
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

# heterps_cc_binary(NAME name SRCS ... DEPS ...)
function(heterps_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# heterps_embed_files(NAME target FILES ...): a library exposing each file's text as
# `std::string_view heterps::embedded::<stem>()`, declared in <target>.h.
function(heterps_embed_files)
  cmake_parse_arguments(ARG "" "NAME" "FILES" ${ARGN})
  set(header "${PROJECT_BINARY_DIR}/embedded/${ARG_NAME}.h")
  set(source "${PROJECT_BINARY_DIR}/embedded/${ARG_NAME}.cc")
  set(decls "")
  set(defs "")
  foreach(file ${ARG_FILES})
    get_filename_component(stem ${file} NAME_WE)
    string(MAKE_C_IDENTIFIER ${stem} id)
    file(READ ${file} text)
    string(APPEND decls "std::string_view ${id}();\n")
    string(APPEND defs "std::string_view ${id}() {\n  static constexpr char kText[] = R\"heterps_embedded(${text})heterps_embedded\";\n  return std::string_view(kText, sizeof(kText) - 1);\n}\n")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  endforeach()
  file(GENERATE OUTPUT ${header} CONTENT
    "#pragma once\n#include <string_view>\nnamespace heterps::embedded {\n${decls}}  // namespace heterps::embedded\n")
  file(GENERATE OUTPUT ${source} CONTENT
    "#include \"embedded/${ARG_NAME}.h\"\nnamespace heterps::embedded {\n${defs}}  // namespace heterps::embedded\n")
  add_library(${ARG_NAME} STATIC ${source})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_BINARY_DIR})
endfunction()

# heterps_proto_library(NAME name PROTO file.proto [DEPS ...]): the messages and gRPC stubs of one
# .proto, generated into the build tree at the source's path ("heterps/x/rpc/file.pb.h").
function(heterps_proto_library)
  cmake_parse_arguments(ARG "" "NAME;PROTO" "DEPS" ${ARGN})
  get_filename_component(stem ${ARG_PROTO} NAME_WE)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(out ${PROJECT_BINARY_DIR}/${rel})
  set(srcs ${out}/${stem}.pb.cc ${out}/${stem}.grpc.pb.cc)
  add_custom_command(
    OUTPUT ${srcs} ${out}/${stem}.pb.h ${out}/${stem}.grpc.pb.h
    COMMAND protobuf::protoc
      --proto_path=${PROJECT_SOURCE_DIR}
      --cpp_out=${PROJECT_BINARY_DIR}
      --grpc_out=${PROJECT_BINARY_DIR}
      --plugin=protoc-gen-grpc=${HETERPS_GRPC_CPP_PLUGIN}
      ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_PROTO}
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_PROTO}
    COMMENT "protoc ${rel}/${ARG_PROTO}")
  # Generated code is not ours to warn about.
  set_source_files_properties(${srcs} PROPERTIES COMPILE_OPTIONS "-w")
  heterps_cc_library(NAME ${ARG_NAME} SRCS ${srcs}
    DEPS protobuf::libprotobuf gRPC::grpc++ ${ARG_DEPS})
endfunction()
